#!/bin/bash
# Package: the Debian package built from this build (cpack), installed on this machine with apt-get,
# used, and purged. Checks:
#   1. the .deb is phos_<version>_amd64.deb and declares its dependencies (Depends from the
#      libraries phos links);
#   2. apt-get installs it: the programs in /usr/bin say the version, the phos account,
#      /var/lib/phos, /etc/phos/phosd.toml (a conffile) and the systemd unit exist;
#   3. the installed phosd serves on simgpu: the template function, built against the installed
#      package out of any tree, deploys and answers;
#   4. apt-get purge leaves none of the package's files, and /etc/phos is gone; /var/lib/phos
#      stays (phos's choice: a reinstall finds its functions again).
# Changes the machine (apt-get as root): skipped (77) when not root or when phos is installed
# already. Leaves the machine as it found it: the data directory and the account are removed last.
#
#   package_test.sh BUILD_DIR VERSION
set -euo pipefail
# shellcheck source-path=SCRIPTDIR source=../testing/phosd.sh
source "$(dirname "$0")/../testing/phosd.sh"
build_dir=$1
version=$2

[[ $(id -u) -eq 0 ]] || { echo "SKIP: installing a package needs root"; exit 77; }
if dpkg-query -W -f='${Status}' phos 2>/dev/null | grep -q "install ok installed"; then
  echo "SKIP: the phos package is installed on this machine already; this test would remove it"
  exit 77
fi
had_account=0
getent passwd phos >/dev/null && had_account=1
had_data=0
[[ -e /var/lib/phos ]] && had_data=1

scratch=$(mktemp -d /tmp/phos-package-test-XXXXXX)
# Readable by the uids sandboxed functions run as: the built function lies here.
chmod 755 "$scratch"
installed=0
cleanup() {
  stop_phosd
  if ((installed)); then DEBIAN_FRONTEND=noninteractive apt-get purge -y -qq phos >/dev/null 2>&1 || true; fi
  ((had_data)) || rm -rf /var/lib/phos
  ((had_account)) || { getent passwd phos >/dev/null && deluser --quiet --system phos >/dev/null 2>&1; } || true
  if ! ((had_account)) && getent group phos >/dev/null; then delgroup --quiet --system phos >/dev/null 2>&1 || true; fi
  rm -rf "$scratch"
}
trap cleanup EXIT

# 1. The package.
(cd "$build_dir" && cpack -G DEB -B "$scratch/deb" >"$scratch/cpack.log" 2>&1) || { cat "$scratch/cpack.log"; fail "cpack"; }
deb=$scratch/deb/phos_${version}_$(dpkg --print-architecture).deb
[[ -f $deb ]] || fail "no $deb: $(ls "$scratch/deb")"
depends=$(dpkg-deb -f "$deb" Depends)
for lib in librocksdb libuv1 libcurl libprotobuf libzstd libxxhash libopenblas; do
  grep -q "$lib" <<<"$depends" || fail "Depends names no $lib package: $depends"
done
# (grep reads all its input: an early exit would end dpkg-deb with SIGPIPE, a failure under pipefail.)
grep -c '\./etc/phos/phosd.toml$' <(dpkg-deb -c "$deb") >/dev/null || fail "the package holds no /etc/phos/phosd.toml"
# (dpkg-deb -I stops reading its control archive once it has the file: its tar complains, harmlessly.)
grep -cx /etc/phos/phosd.toml <(dpkg-deb -I "$deb" conffiles 2>/dev/null) >/dev/null || fail "/etc/phos/phosd.toml is not a conffile"
echo "ok: $(basename "$deb"), Depends: $depends"

# 2. Installed.
DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$deb" >"$scratch/apt.log" 2>&1 || { cat "$scratch/apt.log"; fail "apt-get install"; }
installed=1
# Where systemd runs, the package started its phosd on /var/lib/phos: this test runs its own there.
if [[ -d /run/systemd/system ]]; then systemctl stop phosd.service; fi
# The package's files and links (not its directories, some of which, /lib, are the system's).
dpkg-deb --fsys-tarfile "$deb" | tar -t | grep -v '/$' | sed 's|^\./|/|' | sort >"$scratch/files"
[[ $(/usr/bin/phosd --version | head -1) == "phosd $version" ]] || fail "/usr/bin/phosd --version"
[[ $(/usr/bin/phos-fn --version | head -1) == "phos-fn $version" ]] || fail "/usr/bin/phos-fn --version"
getent passwd phos >/dev/null || fail "no phos account"
[[ -d /var/lib/phos/functions && -d /var/lib/phos/modules ]] || fail "no /var/lib/phos/{functions,modules}"
[[ -f /lib/systemd/system/phosd.service ]] || fail "no systemd unit"
grep -c '^data-dir="/var/lib/phos"' <(/usr/bin/phosd --config /etc/phos/phosd.toml --print-config) >/dev/null ||
  fail "/etc/phos/phosd.toml"
echo "ok: installed ($(wc -l <"$scratch/files") files)"

# 3. It serves: the installed example function and a function built against the package.
cp -r /usr/share/phos/function-template "$scratch/hello"
cmake -S "$scratch/hello" -B "$scratch/hello/build" >"$scratch/configure.log" 2>&1 || { cat "$scratch/configure.log"; fail "configuring the template"; }
cmake --build "$scratch/hello/build" -j2 >"$scratch/build.log" 2>&1 || { cat "$scratch/build.log"; fail "building the template"; }
cp "$scratch/hello/build/modules/hello-fn.simgpu.so" /var/lib/phos/modules/
# The packaged configuration, on a port of its own and sim.
start_phosd "$scratch/phosd.log" /usr/bin/phosd --config /etc/phos/phosd.toml --gpu sim
fn=(/usr/bin/phos-fn --endpoint "$endpoint" --token-file /var/lib/phos/admin.token)
"${fn[@]}" deploy hello "$scratch/hello/build/hello" --upload >/dev/null 2>&1 || { cat "$scratch/phosd.log"; fail "deploy"; }
answer=$("${fn[@]}" invoke hello --data '{"a": 3, "b": 0.5, "x": [1, -2]}')
[[ $answer == '{"y":[3.5,-5.5]}' ]] || fail "invoke answered $answer, not y = 3x + 0.5 = [3.5, -5.5]"
"${fn[@]}" deploy mlp /usr/lib/phos/functions/mlp -- --size-mib 1 --layers 2 >/dev/null 2>&1 || { cat "$scratch/phosd.log"; fail "deploying /usr/lib/phos/functions/mlp"; }
[[ $("${fn[@]}" invoke mlp --data '{"seed": 1}') == *'"checksum"'* ]] || fail "mlp did not answer"
stop_phosd
echo "ok: the installed phosd serves the template function ($answer) and the packaged mlp"

# 4. Purged.
DEBIAN_FRONTEND=noninteractive apt-get purge -y -qq phos >"$scratch/purge.log" 2>&1 || { cat "$scratch/purge.log"; fail "apt-get purge"; }
installed=0
left=()
while read -r path; do
  [[ -f $path || -L $path ]] && left+=("$path")
done <"$scratch/files"
((${#left[@]} == 0)) || fail "purge left: ${left[*]}"
[[ ! -e /etc/phos ]] || fail "purge left /etc/phos: $(find /etc/phos)"
[[ ! -e /usr/lib/phos && ! -e /usr/share/phos ]] || fail "purge left /usr/lib/phos or /usr/share/phos"
[[ -d /var/lib/phos ]] || fail "purge removed the data directory"
echo "ok: purged; only /var/lib/phos stays"
