#!/bin/bash
# Guest side of vm/vmtest.sh's guest pool: one booted guest serves many commands, one at a time.
#
# Booted by vmtest.sh (ZTBP_GUEST_POOL set) with this script as its command. The pool's control folder is
# /ztbp/ctl at boot; the host puts each command in jobs/ID/ (cmd, env, files, out = its OUTDIR relative to the
# shared folder ztbp_share, go = ready to run). For each job the guest bind-mounts the job's folder on /ztbp/ctl
# and its OUTDIR on /ztbp/out, so the command sees exactly what a fresh boot gives it (boot.sh), runs it in a
# session of its own with its output in /ztbp/out/console.log, then puts the guest back as a boot leaves it:
# the command's processes killed, its mounts unmounted, NVMeVirt unloaded, every zone reset, /tmp emptied,
# the NVMe namespaces' buffer caches flushed, the kernel log cleared. Last it writes jobs/ID/exit-status, which ends the job for the host.
# With no job for ZTBP_POOL_IDLE seconds (default 900) the guest powers off.
set -uo pipefail

POOL=/ztbp/pool
SHARE=/ztbp/share
IDLE_S="${ZTBP_POOL_IDLE:-900}"

say() { echo "ztbp-guest: $*"; }

setup() {
	dmesg -n 4  # the boot was verbose (vmtest.sh: a hang shows where); the commands' kernel messages stay quiet
	mkdir -p "$POOL" "$SHARE"
	mount --bind /ztbp/ctl "$POOL" || return 1
	mount -t 9p -o trans=virtio,version=9p2000.L,msize=524288 ztbp_share "$SHARE" || return 1
	modprobe -q ext4; modprobe -q btrfs
	MY_SID="$(ps -o sid= -p $$ | tr -d ' ')"
	KERNEL="$(uname -r)"
	# a pipe nobody writes to: `read -t` on it is a sleep without a fork (a fork costs ~60 ms under TCG, and an
	# idle guest polling with sleep(1) five times a second cost a quarter of a host core)
	mkfifo /run/ztbp-pool-tick && exec 3<> /run/ztbp-pool-tick
	touch "$POOL/ready"
}

# Every process the command left behind, into LEFT: any process outside this script's session but kernel threads
# and PID 1. Builtins only: a fork costs ~60 ms under TCG.
leftovers() {
	local p stat
	LEFT=()
	for p in /proc/[0-9]*; do
		p="${p#/proc/}"
		[ "$p" -le 2 ] && continue
		read -r stat < "/proc/$p/stat" 2>/dev/null || continue
		# shellcheck disable=SC2086
		set -- ${stat##*) }  # after the command name: state ppid pgrp session ...
		[ "${2:-}" = 2 ] && continue  # a kernel thread (child of kthreadd)
		[ "${4:-$MY_SID}" != "$MY_SID" ] && LEFT+=("$p")
	done
}

reset_guest() { # NMOUNTS: undo what a command changed (NMOUNTS: the lines of /proc/mounts before it)
	local before="$1" i d z mounts=() zoned=()
	leftovers
	[ "${#LEFT[@]}" -gt 0 ] && kill -KILL "${LEFT[@]}" 2>/dev/null && sleep 0.2
	while read -r d _; do
		[ "$d" = nvmev ] && { rmmod nvmev || say "pool: rmmod nvmev failed"; }
	done < /proc/modules
	# mounts made since (the job's two bind mounts and the command's own), newest first
	mapfile -t mounts < /proc/mounts
	for ((i = ${#mounts[@]} - 1; i >= before; i--)); do
		set -- ${mounts[i]}
		umount "$2" 2>/dev/null || umount -l "$2" 2>/dev/null || say "pool: cannot unmount $2"
	done
	for d in /sys/block/nvme*n*; do
		[ -e "$d/queue/zoned" ] && read -r z < "$d/queue/zoned" && [ "$z" != none ] && zoned+=("/dev/${d##*/}")
	done
	for d in "${zoned[@]}"; do
		blkzone reset "$d" 2>/dev/null || say "pool: blkzone reset $d failed"
	done
	rm -rf /tmp/* /tmp/.[!.]* 2>/dev/null
	sync
	# the namespaces' cached blocks go (no read of the next command is answered from memory), the programs' pages
	# stay: with the whole page cache dropped, each command's first fio started in 8-11 s instead of 2 and its first
	# bpftrace compile took 34-36 s instead of 17-18 (nvme_zone.bt; measured in one guest on a busy host)
	for d in /dev/nvme*n*; do
		[ -b "$d" ] && { blockdev --flushbufs "$d" || say "pool: blockdev --flushbufs $d failed"; }
	done
	dmesg -C
}

run_job() { # ID
	local dir="$POOL/jobs/$1" rel before rc=0 t0 t m=()
	read -r rel < "$dir/out"
	mapfile -t m < /proc/mounts
	before=${#m[@]}
	if ! mount --bind "$SHARE/$rel" /ztbp/out || ! mount --bind "$dir" /ztbp/ctl; then
		reset_guest "$before"
		echo 125 > "$dir/exit-status"
		return
	fi
	dmesg -C
	read -r t0 _ < /proc/uptime
	{
		say "pooled guest (job $JOBS, up $t0 s), kernel $KERNEL; running the command"
		(
			set -a
			# shellcheck disable=SC1091
			. /ztbp/ctl/env
			set +a
			export PATH="/ztbp/src/tools/ztbp-ctl/build:$PATH"
			export ZTBP_STAGE_LOG=/ztbp/ctl/stages.log  # probe-lib.sh's say: each stage with the uptime
			export ZTBP_VERSIONS_CACHE=/run/ztbp-versions.env  # record_versions: asked once per boot
			cd /ztbp/src || exit 125
			exec setsid bash /ztbp/ctl/cmd
		) </dev/null
		rc=$?
		read -r t _ < /proc/uptime
		say "command exited with status $rc after $(( ${t%.*} - ${t0%.*} )) s"
	} >> /ztbp/out/console.log 2>&1
	reset_guest "$before"
	echo "$rc" > "$dir/exit-status"
}

main() {
	setup || { say "pool: setup failed"; exit 1; }
	say "pool ready (kernel $(uname -r)); waiting for commands"
	JOBS=0
	local idle_since=$SECONDS go id
	while [ $((SECONDS - idle_since)) -lt "$IDLE_S" ]; do
		for go in "$POOL"/jobs/*/go; do
			[ -e "$go" ] || continue
			id="${go%/go}"
			id="${id##*/}"
			rm -f "$go"
			JOBS=$((JOBS + 1))
			run_job "$id"
			idle_since=$SECONDS
		done
		read -r -t 0.5 -u 3 _
	done
	say "pool: idle for $IDLE_S s after $JOBS commands; powering off"
}

main "$@"
