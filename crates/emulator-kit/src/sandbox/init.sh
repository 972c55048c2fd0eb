# The init of one sandbox: pid 1 of its new pid, mount, UTS and IPC namespaces (and network
# namespace when `net=none`), created by `unshare`. It is bash started as `/sbin/init` with no
# arguments, reading this script from its stdin, the lifeline pipe, after the lines the emulator
# writes first: `set --` with $1 the sandbox's state directory (holding the prepared upper layer
# `upper`, overlay's `work`, and the mount point `root`), $2 its hostname, then `HOST TARGET
# ro|rw` triples to bind in; and `net=host|none`. So `ps` inside the sandbox shows `/sbin/init`
# and nothing of the emulator's. Everything below happens in the new
# mount namespace (propagation private): the host's mounts are never touched.
set -eu
state=$1 hostname=$2
shift 2
# Our pid as the host sees it: /proc is still the host's here.
read -r host_pid _ </proc/self/stat
root=$state/root
# redirect_dir, index and metacopy off: every file of the upper layer holds its own data, so a
# copy of it (a snapshot) is a self-contained upper layer for another sandbox.
mount -t overlay -o "lowerdir=/,upperdir=$state/upper,workdir=$state/work,redirect_dir=off,index=off,metacopy=off" overlay "$root"
while [ $# -ge 3 ]; do
    if [ "$3" = ro ]; then
        mount --bind -o ro "$1" "$root$2"
    else
        mount --bind "$1" "$root$2"
    fi
    shift 3
done
mount -t proc -o nosuid,nodev,noexec proc "$root/proc"
printf '%s\n' "$hostname" >"$root/proc/sys/kernel/hostname"
mount --bind -o ro "$root/proc/sys" "$root/proc/sys"
if [ -e "$root/proc/sysrq-trigger" ]; then
    mount --bind /dev/null "$root/proc/sysrq-trigger"
fi
mount -t sysfs -o ro,nosuid,nodev,noexec sysfs "$root/sys"
mount -t devpts -o newinstance,ptmxmode=0666,mode=0620,gid=5 devpts "$root/dev/pts"
if [ "$net" = none ]; then
    # A network namespace of its own: loopback only, no route anywhere else.
    ip link set lo up
fi
cd "$root"
pivot_root . .old-root
cd /
umount -l /.old-root
rmdir /.old-root

echo "ready $host_pid"
exec >/dev/null 2>&1
# Signals from inside the sandbox are ignored (the kernel drops those without a handler for pid
# 1; these have bash's own). Bash reaps orphans as they die (its SIGCHLD handler waits for any
# child). The lifeline is read by bash itself, so no other process is the harness's: at EOF
# (the emulator destroyed the sandbox or went away) the init exits.
trap '' HUP INT QUIT TERM USR1 USR2 PIPE
while read -r _; do :; done
exit 0
