#!/bin/sh
# SSH operation counter for tests/benchmarks/bench_deploy.py (not a test tool of its own).
# The benchmark points ANSIBLE_SSH_EXECUTABLE / ANSIBLE_SFTP_EXECUTABLE / ANSIBLE_SCP_EXECUTABLE
# at symlinks named ssh / sftp / scp to this script: every client process Ansible starts appends
# "<kind> <host>" to $BENCH_SSH_LOG (one short O_APPEND write: safe across forks), then becomes
# the real client (exec: same pid, same stdin/stdout/stderr; ~1 ms added).
kind=${0##*/}
case $kind in
    ssh)  eval "host=\${$(( $# - 1 ))}" ;;          # ansible: ssh [opts...] HOST CMD
    sftp) eval "host=\${$#}" ;;                     # sftp [opts...] HOST
    scp)  eval "a=\${$(( $# - 1 ))} b=\${$#}"            # scp [opts...] SRC DEST, one is HOST:PATH
          case $a in /*) a=$b ;; esac; host=${a%%:*}; host=${host#[}; host=${host%]} ;;
    *)    echo "ssh_count.sh: called as $kind (want ssh, sftp or scp)" >&2; exit 2 ;;
esac
tag=$kind
if [ "$kind" = ssh ] && [ $# -ge 3 ]; then              # ssh [opts...] -O check|stop HOST: master control
    eval "o=\${$(( $# - 2 ))}"; [ "$o" = -O ] && { tag=ssh-control; eval "host=\${$#}"; }
fi
[ -n "${BENCH_SSH_LOG:-}" ] && printf '%s %s\n' "$tag" "$host" >>"$BENCH_SSH_LOG"
exec "/usr/bin/$kind" "$@"
