# The init of one sandbox: pid 1 of its new pid, mount, UTS and IPC namespaces (created by
# `unshare`), run by /bin/sh with: $1 the sandbox's state directory (holding the prepared upper
# layer `upper`, overlay's `work`, and the mount point `root`), $2 its hostname, then
# `HOST TARGET ro|rw` triples to bind in. Everything below happens in the new mount namespace
# (propagation private): the host's mounts are never touched.
set -eu
state=$1 hostname=$2
shift 2
# Our pid as the host sees it: /proc is still the host's here.
read -r host_pid _ </proc/self/stat
root=$state/root
# redirect_dir, index and metacopy off: every file of the upper layer holds its own data, so a
# copy of it (a snapshot) is a self-contained upper layer for another sandbox.
mount -t overlay -o "lowerdir=/,upperdir=$state/upper,workdir=$state/work,redirect_dir=off,index=off,metacopy=off" execseam-sandbox "$root"
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
cd "$root"
pivot_root . .execseam-old
cd /
umount -l /.execseam-old
rmdir /.execseam-old
echo "ready $host_pid"
exec >/dev/null 2>&1
# Reap orphans (the shell waits for its foreground `cat` with waitpid(-1), which collects any
# child) until the emulator closes the lifeline on stdin: it destroyed the sandbox or went away.
# A `cat` killed from inside the sandbox is restarted; pid 1 itself ignores signals from inside.
while :; do
    if cat; then exit 0; fi
done
