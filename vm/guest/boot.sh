#!/bin/bash
# Guest side of vm/vmtest.sh, started by /sbin/ztbp-init (PID 1) once the 9p shares are mounted:
#   /ztbp/src  the repository, read-only
#   /ztbp/out  the host's output folder, read-write
#   /ztbp/ctl  the harness's control folder: cmd (the command to run), env (variables for it),
#              files the host passed in, and exit-status (written here, read by the host)
# Runs the command with the serial console as its terminal, writes its exit status to
# /ztbp/ctl/exit-status, syncs and powers the guest off.
set -uo pipefail

CTL=/ztbp/ctl

say() { echo "ztbp-guest: $*"; }

setup_kernel_fs() {
	mount -t tracefs nodev /sys/kernel/tracing 2>/dev/null || true
	mount -t debugfs nodev /sys/kernel/debug 2>/dev/null || true
	mount -t bpf bpf /sys/fs/bpf 2>/dev/null || true
	mkdir -p /dev/pts /dev/shm
	mount -t devpts devpts /dev/pts 2>/dev/null || true
	mount -t tmpfs tmpfs /dev/shm 2>/dev/null || true
	hostname ztbp-guest
	ulimit -l unlimited   # bpftrace maps and perf buffers are locked memory
	ulimit -n 65536
}

cache_src() {
	# The repository read-only with the guest's page and attribute cache (cache=loose) and 512 KiB messages, mounted
	# over ztbp-init's uncached one: under emulation every uncached stat over 9p took ~28 ms, and Python's imports
	# from the checkout's venv made thousands of them (measured: 5,565 stats, 153 s of one `ztbp cluster`). The
	# checkout does not change while a guest runs (`just test` builds ztbp-ctl before the guests boot; the guest
	# pool keeps a guest for many commands, and a file made after the guest looked for it may stay unseen). An older
	# vm/vmtest.sh has no second tag: the plain mount stays.
	mount -t 9p -o trans=virtio,version=9p2000.L,ro,cache=loose,msize=524288 ztbp_src_cached /ztbp/src \
		2> /dev/null || true
}

wait_for_nvme() {
	# The NVMe driver probes asynchronously; give it a few seconds to create the namespace node.
	local i
	for i in $(seq 1 100); do
		if [ -n "$(ls /dev/nvme*n* 2>/dev/null)" ] || [ -f "$CTL/no-nvme" ]; then
			return 0
		fi
		sleep 0.1
	done
	say "no NVMe namespace appeared"
}

power_off() {
	sync
	echo o > /proc/sysrq-trigger
	# Spin on a shell builtin until the power goes: loading a binary now could hit the detached disk.
	while :; do :; done
}

main() {
	setup_kernel_fs
	cache_src
	wait_for_nvme
	if [ -f "$CTL/env" ]; then
		set -a
		# shellcheck disable=SC1091
		. "$CTL/env"
		set +a
	fi
	# ztbp-ctl, built on the host (`just build`, same Debian 12 libc), is on the guest's PATH from the share:
	# the image need not be rebuilt when the tool changes.
	export PATH="/ztbp/src/tools/ztbp-ctl/build:$PATH"
	say "up in $(cut -d' ' -f1 /proc/uptime) s, kernel $(uname -r); running the command"
	local rc=0
	cd /ztbp/src || true
	if [ -f "$CTL/interactive" ]; then
		setsid -c bash -l </dev/ttyS0 >/dev/ttyS0 2>&1 || rc=$?
	else
		bash "$CTL/cmd" </dev/null || rc=$?
	fi
	echo "$rc" > "$CTL/exit-status"
	say "command exited with status $rc; powering off"
	power_off
}

main "$@"
