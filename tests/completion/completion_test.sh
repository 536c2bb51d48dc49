#!/bin/bash
# BashCompletion: packaging/phos-fn.bash-completion completes what phos-fn's --help says: every
# subcommand, a subcommand's options, the global options; and nothing for an unknown subcommand.
#
#   completion_test.sh PHOS_FN COMPLETION_SCRIPT
set -euo pipefail
phos_fn=$1
# shellcheck source=/dev/null
source "$2"
fail() { echo "FAIL: $*" >&2; exit 1; }

# The completions of the command line `$*` (its last word the one being completed, "" for a new
# word), as bash hands it over: COMP_LINE and COMP_POINT, and COMP_WORDS split at ':' too.
complete_line() {
  COMP_LINE="$phos_fn $*"
  COMP_POINT=${#COMP_LINE}
  local IFS=$' \t\n:'
  # shellcheck disable=SC2206  # split as bash's completion splits
  COMP_WORDS=($COMP_LINE)
  COMP_CWORD=$((${#COMP_WORDS[@]} - 1))
  COMPREPLY=()
  _phos_fn
  printf '%s\n' "${COMPREPLY[@]}"
}

subcommands=$(complete_line "")
for sub in deploy invoke ls instances describe checkpoint migrate logs job rm run check new; do
  grep -qx "$sub" <<<"$subcommands" || fail "'$sub' is not among the subcommands completed: $subcommands"
done
[[ $(complete_line "chec" | sort) == "check"$'\n'"checkpoint" ]] || fail "chec completes to $(complete_line chec)"
[[ $(complete_line "--end") == "--endpoint" ]] || fail "--end completes to $(complete_line --end)"
[[ $(complete_line deploy --up) == "--upload" ]] || fail "deploy --up completes to $(complete_line deploy --up)"
[[ $(complete_line --endpoint http://x deploy --up) == "--upload" ]] || fail "a global option's value is no subcommand"
[[ -z $(complete_line nosuch --) ]] || fail "an unknown subcommand has options: $(complete_line nosuch --)"
# An endpoint with ':' in it (bash's word breaks) is still one word before the subcommand.
[[ $(complete_line --endpoint unix:///run/phos/api.sock deploy --up) == "--upload" ]] ||
  fail "after --endpoint unix:///..., deploy --up completes to $(complete_line --endpoint unix:///run/phos/api.sock deploy --up)"
grep -qx deploy <<<"$(complete_line --endpoint http://127.0.0.1:7070 "")" || fail "no subcommands after --endpoint http://..."
echo "ok: phos-fn's subcommands and options complete as its --help lists them"
