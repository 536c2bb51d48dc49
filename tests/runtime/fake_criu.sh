#!/bin/sh
# A stand-in for criu's command line (cpu_state_test): records its arguments, one line per call,
# in $FAKE_CRIU_LOG and plays each command's part without checkpointing anything.
#   check    prints criu 3.17's vDSO failure and exits $FAKE_CRIU_CHECK_EXIT (default 0)
#   dump     writes core.img into the -D directory
#   restore  exits $FAKE_CRIU_RESTORE_EXIT when set; otherwise writes a `ready` frame to its
#            descriptor 3 (the channel criu would give the restored process), starts a sleeping
#            process holding that descriptor in the restored process's place and writes its pid
#            to --pidfile
echo "$*" >> "${FAKE_CRIU_LOG:-/dev/null}"
cmd=$1
shift
case "$cmd" in
  check)
    if [ "${FAKE_CRIU_CHECK_EXIT:-0}" != 0 ]; then
      echo "Error (criu/vdso.c:381): vdso: Unexpected rt vDSO area bounds"
      echo "Error (criu/crtools.c:260): Could not initialize kernel features detection."
      exit "$FAKE_CRIU_CHECK_EXIT"
    fi
    echo "Looks good."
    ;;
  dump)
    while [ $# -gt 0 ]; do
      if [ "$1" = "-D" ]; then : > "$2/core.img"; fi
      shift
    done
    ;;
  restore)
    if [ -n "${FAKE_CRIU_RESTORE_EXIT:-}" ]; then
      echo "Error (criu/cr-restore.c:1): fake restore failure"
      exit "$FAKE_CRIU_RESTORE_EXIT"
    fi
    pidfile=
    while [ $# -gt 0 ]; do
      if [ "$1" = "--pidfile" ]; then pidfile=$2; fi
      shift
    done
    printf '\000\000\000\000\001' >&3
    sleep 30 </dev/null >/dev/null 2>&1 &
    echo $! > "$pidfile"
    ;;
  *)
    echo "fake criu: unknown command $cmd" >&2
    exit 2
    ;;
esac
