# Progress lines for the testbed's long steps (sourced by the scripts of tests/testbed/).
#
#   with_progress LABEL [--log FILE | --out FILE] -- CMD ARGS...
#       runs CMD in the foreground; while it runs, a ticker prints every $PROGRESS_S seconds
#       (default 20) "[LABEL] ... still running, N s" and the last line of FILE if given --
#       on stderr, so it never mixes into a command substitution's value. --log FILE: a log
#       CMD writes itself; --out FILE: CMD's stdout and stderr are appended to FILE (else they
#       are unchanged). Returns CMD's status; under `set -e` a failing CMD ends the script as
#       it would without the wrapper.
#
# The ticker is a background subshell: stopped by its PID when CMD returns, and it stops by
# itself within a second once the calling script is gone (it is then no longer the script's
# child: a script that exited but was not reaped yet still answers `kill -0`, its children
# are re-parented at once). It does not keep the callers' lock descriptors (8, 9) open.
PROGRESS_S=${PROGRESS_S:-20}

with_progress() {
    local label=$1 logf="" out="" tick rc
    shift
    case ${1:-} in
        --log) logf=$2; shift 2 ;;
        --out) logf=$2; out=$2; shift 2 ;;
    esac
    [[ ${1:-} == -- ]] && shift
    local me=$BASHPID            # (expanded here: in the background job it is the job's own PID)
    _progress_ticker "$label" "$logf" "$me" 8>&- 9>&- &
    tick=$!
    if [[ -n $out ]]; then "$@" >>"$out" 2>&1; else "$@"; fi
    rc=$?
    kill "$tick" 2>/dev/null || true
    wait "$tick" 2>/dev/null || true
    return "$rc"
}

_progress_ticker() {
    local label=$1 logf=$2 parent=$3 start=$SECONDS next last
    next=$((SECONDS + PROGRESS_S))
    while sleep 1; do
        _progress_parent_is "$parent" || exit 0
        (( SECONDS >= next )) || continue
        next=$((SECONDS + PROGRESS_S))
        last=""
        if [[ -n $logf && -s $logf ]]; then
            last=$(tail -n 1 "$logf" 2>/dev/null | tr -d '\r' | cut -c1-160)
        fi
        echo "[$label] ... still running, $((SECONDS - start)) s${last:+: $last}" >&2
    done
}

# Is the ticker ($BASHPID) still a child of PID $1?
_progress_parent_is() {
    local stat
    if [[ -r /proc/$BASHPID/stat ]]; then
        read -r stat <"/proc/$BASHPID/stat" || return 1
        stat=${stat##*) }            # drop "pid (comm) ": the rest is "state ppid ..."
        set -- "$1" $stat
        [[ $3 == "$1" ]]
    else
        kill -0 "$1" 2>/dev/null
    fi
}
