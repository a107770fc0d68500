#!/usr/bin/env bash
# Boot the ZTBP guest in QEMU with an emulated zoned NVMe namespace and run one command in it.
#
# The repository is shared read-only at /ztbp/src, OUTDIR read-write at /ztbp/out; the zoned namespace is
# /dev/nvme0n1 in the guest. The serial console is shown and saved as OUTDIR/console.log, the guest's exit
# status comes back through a file in the control share and becomes this script's exit status. A host-side
# timeout kills a hung guest; whatever it wrote to OUTDIR stays. Ctrl-C asks the guest to stop (it sees
# /ztbp/ctl/stop) and gives it STOP_GRACE seconds to save its data before QEMU is killed.
set -euo pipefail

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
CACHE_DIR="${ZTBP_CACHE:-$HOME/.cache/ztbp}"
QEMU="${QEMU:-qemu-system-x86_64}"
DEFAULT_TIMEOUT=900
DEFAULT_MEMORY="4G"
# Two vCPUs on two host threads. One vCPU is faster beside other work (the host path's test: 143 s against 194 s
# beside two busy processes on a 2-core machine; 101 s with two vCPUs alone), but under load a 1-vCPU guest loses
# NVMe completions now and then (reads of 59 s each in QEMU's profile, a Ctrl-C capture's fio 57 s to stop), and two
# vCPUs on one host thread (-accel tcg,thread=single) stalled the host path's watch session for 10 minutes in one
# of two runs. Two vCPUs on two host threads showed neither.
DEFAULT_SMP=2
DEFAULT_ZONE_SIZE="32M"
DEFAULT_ZONES=64
DEFAULT_LBA_SIZE=4096
KVM_PROBE_SECONDS=25
STOP_GRACE=300
POOL="${ZTBP_GUEST_POOL:-}"         # a folder: keep one guest booted per configuration there (see usage)
POOL_SHARE="${ZTBP_GUEST_POOL_SHARE:-}"
POOL_IDLE="${ZTBP_POOL_IDLE:-900}"  # a pooled guest powers off after this many seconds without a command
POOL_LIFETIME=14400                 # and at the latest after this many
POOL_BOOT_WAIT=600                  # seconds a pooled guest has to boot and say it is ready
POOL_SILENT=30                      # seconds without a new console line after which its boot counts as hung
# (the longest quiet stretch of 25 boots in busy test runs: 11.7 s between two kernel lines; a hung boot stops
# in the middle of a line); twice as long before its first line
POOL_MAX="${ZTBP_POOL_MAX:-2}"      # guests kept at once: booting one more stops the least recently used
EXIT_TIMEOUT=124     # the guest did not finish in time
EXIT_NO_STATUS=125   # the guest stopped without reporting a status (crash, panic)

OUTDIR=""
IMAGE_DIR=""
SUITE=""
TIMEOUT=$DEFAULT_TIMEOUT
MEMORY=$DEFAULT_MEMORY
SMP=$DEFAULT_SMP
ZONE_SIZE=$DEFAULT_ZONE_SIZE
ZONES=$DEFAULT_ZONES
ZONE_CAP=""
MAX_OPEN=0
MAX_ACTIVE=0
LBA_SIZE=$DEFAULT_LBA_SIZE
CONV_SIZE=""
NO_ZNS=0
CTL_DIR=""
SHARE_DIR=""
ACCEL="auto"
# The emulated CPU: QEMU's "max" without the AVX family. QEMU 7.2 was the first to emulate AVX and AVX2, and
# runs some of it wrongly: numpy's AVX2 argsort returned out-of-order arrays or died with SIGSEGV in the guest,
# polars' group_by died with SIGSEGV. Without AVX, every library takes its SSE code path (vm/README.md).
DEFAULT_TCG_CPU="max,avx=off,avx2=off,fma=off,f16c=off,vaes=off,vpclmulqdq=off,avx-vnni=off"
CPU="${ZTBP_GUEST_CPU:-}"
APPEND_EXTRA=""
INTERACTIVE=0
QUIET=0
FILES=()
ENVS=()
COMMAND=""

WORK=""
QEMU_PID=""
ACCEL_ARGS=()
NVME_ARGS=()
STOP_REQUESTED=0
STOP_FILE=""
JOB=""
TAIL_PID=""
KDIR=""
RC=""
POOL_PID=""
# The guest that supervise() watches, as run_qemu or pool_main sets it: how to kill it, and the names in messages.
KILL_GUEST=kill_qemu
GUEST_NAME="the guest"
RUN_NAME="the guest"

usage() {
	cat <<EOF
Usage: $0 [options] -- COMMAND

Boot the ZTBP guest (QEMU, Debian 12 or 13 kernel, bpftrace, fio) and run COMMAND in it with bash.
The repository is at /ztbp/src (read-only), OUTDIR at /ztbp/out, the zoned namespace is /dev/nvme0n1.
Exit status: COMMAND's status in the guest; $EXIT_TIMEOUT on timeout; $EXIT_NO_STATUS if the guest stopped without one.

Options:
  -o, --out DIR          output folder shared read-write at /ztbp/out; console.log goes here
                         (default: a new temporary folder, printed at the end)
  -i, --image DIR        guest image folder (default: built or reused by vm/image.sh)
      --suite SUITE      Debian suite of the image vm/image.sh builds or reuses: bookworm (Debian 12,
                         Linux 6.1; the default, or ZTBP_SUITE) or trixie (Debian 13, Linux 6.12)
  -t, --timeout SEC      kill the guest after SEC seconds (default: $DEFAULT_TIMEOUT)
  -m, --memory SIZE      guest RAM (default: $DEFAULT_MEMORY)
  -s, --smp N            guest CPUs, 1 to 64 (default: $DEFAULT_SMP)
      --zone-size SIZE   zone size, QEMU size syntax (default: $DEFAULT_ZONE_SIZE)
      --zones N          number of zones (default: $DEFAULT_ZONES)
      --zone-cap SIZE    zone capacity (default: the zone size)
      --max-open N       max open zones, 0 = no limit (default: 0)
      --max-active N     max active zones, 0 = no limit (default: 0)
      --lba-size BYTES   logical block size (default: $DEFAULT_LBA_SIZE)
      --conv-ns SIZE     add a second, conventional namespace of SIZE (/dev/nvme0n2)
      --no-zns           no emulated NVMe device (for the NVMeVirt backend)
      --accel MODE       auto, kvm or tcg (default: auto = KVM only if a test boot works)
      --cpu MODEL        QEMU's -cpu (default: host under KVM; under TCG $DEFAULT_TCG_CPU,
                         QEMU 7.2's AVX emulation being wrong; or ZTBP_GUEST_CPU)
      --append ARGS      extra guest kernel command line (e.g. 'memmap=1025M\$4G')
      --file FILE        copy FILE into the control share, visible as /ztbp/ctl/<name> (repeatable)
      --env NAME=VALUE   set a variable for COMMAND (repeatable)
      --interactive      give the guest console a login shell instead of COMMAND
  -q, --quiet            do not echo the console (it is still saved)
      --ctl-dir DIR      use DIR as the control folder /ztbp/ctl (kept; default: a temporary one)
      --share DIR        share DIR read-write with the guest as the 9p tag ztbp_share
  -h, --help             this text

Guest pool (the test suite's shared guests): with ZTBP_GUEST_POOL=DIR and ZTBP_GUEST_POOL_SHARE=SHARE in the
environment, a command whose OUTDIR lies inside SHARE runs in a guest kept booted in DIR, one per configuration
(image, CPUs, memory, device, kernel command line), instead of a guest of its own: the first such command boots
it (verbose on its own console; a boot silent for $POOL_SILENT s is killed and booted once more, counted in
DIR/hung-boots), the next ones
reuse it; DIR/seconds gets each boot's and each command's seconds, wall and its QEMU's CPU, DIR/stages each
command's stage lines after the guest's uptime. Between commands the guest is put back as a boot leaves it
(vm/guest/pool.sh: processes, mounts,
NVMeVirt, zones, /tmp, caches, kernel log). Same contract: COMMAND's status, console.log in OUTDIR, Ctrl-C asks
the command to stop; a timeout or SIGTERM kills the pooled guest. It powers off after ZTBP_POOL_IDLE seconds
without a command (default $POOL_IDLE).

Example:
  $0 -o /tmp/out --zones 16 -- 'blkzone report /dev/nvme0n1 > /ztbp/out/zones.txt'

Needs: $QEMU (qemu-system-x86), and for the first image build mmdebstrap and e2fsprogs:
install them with: bash vm/install-deps.sh (or: just deps)
EOF
}

log() { echo "vmtest: $*" >&2; }
die() { echo "vmtest: error: $*" >&2; exit 2; }

parse_args() {
	while [ $# -gt 0 ]; do
		case "$1" in
			-o|--out) OUTDIR="$2"; shift ;;
			-i|--image) IMAGE_DIR="$2"; shift ;;
			--suite) SUITE="$2"; shift ;;
			-t|--timeout) TIMEOUT="$2"; shift ;;
			-m|--memory) MEMORY="$2"; shift ;;
			-s|--smp) SMP="$2"; shift ;;
			--zone-size) ZONE_SIZE="$2"; shift ;;
			--zones) ZONES="$2"; shift ;;
			--zone-cap) ZONE_CAP="$2"; shift ;;
			--max-open) MAX_OPEN="$2"; shift ;;
			--max-active) MAX_ACTIVE="$2"; shift ;;
			--lba-size) LBA_SIZE="$2"; shift ;;
			--conv-ns) CONV_SIZE="$2"; shift ;;
			--no-zns) NO_ZNS=1 ;;
			--ctl-dir) CTL_DIR="$2"; shift ;;
			--share) SHARE_DIR="$2"; shift ;;
			--accel) ACCEL="$2"; shift ;;
			--cpu) CPU="$2"; shift ;;
			--append) APPEND_EXTRA="$2"; shift ;;
			--file) FILES+=("$2"); shift ;;
			--env) ENVS+=("$2"); shift ;;
			--interactive) INTERACTIVE=1 ;;
			-q|--quiet) QUIET=1 ;;
			-h|--help) usage; exit 0 ;;
			--) shift; COMMAND="$*"; break ;;
			*) usage >&2; die "unknown option '$1' (the guest command goes after --)" ;;
		esac
		shift
	done
	if [ -z "$COMMAND" ] && [ "$INTERACTIVE" -eq 0 ]; then
		usage >&2
		die "no command given: put it after --, e.g. $0 -- 'uname -r'"
	fi
	[[ "$TIMEOUT" =~ ^[0-9]+$ ]] || die "--timeout must be whole seconds, got '$TIMEOUT'"
	[[ "$ZONES" =~ ^[1-9][0-9]*$ ]] || die "--zones must be a positive integer, got '$ZONES'"
	[[ "$SMP" =~ ^([1-9]|[1-5][0-9]|6[0-4])$ ]] || die "--smp must be 1 to 64 CPUs, got '$SMP'"
	[[ "$LBA_SIZE" =~ ^(512|4096)$ ]] || die "--lba-size must be 512 or 4096, got '$LBA_SIZE'"
	case "$ACCEL" in auto|kvm|tcg) ;; *) die "--accel must be auto, kvm or tcg, got '$ACCEL'" ;; esac
	local f
	for f in "${FILES[@]}"; do
		[ -f "$f" ] || die "--file $f: no such file"
	done
}

check_deps() {
	command -v "$QEMU" >/dev/null 2>&1 || \
		die "$QEMU not found; install the host packages with: bash vm/install-deps.sh (or: just deps)"
	command -v setsid >/dev/null 2>&1 || die "setsid not found; install util-linux"
}

ensure_image() {
	if [ -z "$IMAGE_DIR" ]; then
		local suite_args=()
		[ -n "$SUITE" ] && suite_args=(--suite "$SUITE")
		IMAGE_DIR="$(bash "$REPO/vm/image.sh" "${suite_args[@]}" | tail -n 1)" || die "no guest image (see above)"
	fi
	local f
	for f in rootfs.ext4 vmlinuz initrd.img; do
		[ -f "$IMAGE_DIR/$f" ] || die "$IMAGE_DIR/$f missing; build the image with: just image"
	done
}

# Does KVM really run a guest kernel here? Some nested setups expose /dev/kvm but hang on boot.
# Boot the guest kernel without a root disk: under a working KVM it panics ("VFS: Unable to mount
# root") within seconds. The verdict is cached per host kernel, QEMU version and guest kernel.
kvm_verdict() {
	[ -w /dev/kvm ] || { echo tcg; return; }
	local key cache verdict
	key="$(uname -r)-$("$QEMU" --version | head -n 1 | tr -cd '0-9.')-$(cat "$IMAGE_DIR/kernel-release" 2>/dev/null)"
	cache="$CACHE_DIR/kvm-verdict-$(echo "$key" | sha256sum | cut -c1-12)"
	if [ -f "$cache" ]; then
		cat "$cache"
		return
	fi
	log "testing whether KVM boots a kernel here (once; verdict cached in $cache)"
	local probe_log
	probe_log="$(mktemp)"
	timeout "$KVM_PROBE_SECONDS" "$QEMU" \
		-accel kvm \
		-cpu host \
		-m 512M \
		-nodefaults \
		-display none \
		-no-reboot \
		-serial "file:$probe_log" \
		-kernel "$IMAGE_DIR/vmlinuz" \
		-append "console=ttyS0 panic=-1 root=/dev/ztbp-none" \
		</dev/null >/dev/null 2>&1 || true
	if grep -q -e 'Kernel panic' -e 'VFS: Unable to mount root' "$probe_log"; then
		verdict=kvm
	else
		verdict=tcg
	fi
	rm -f "$probe_log"
	mkdir -p "$CACHE_DIR"
	echo "$verdict" > "$cache"
	echo "$verdict"
}

choose_accel() {
	local mode="$ACCEL"
	[ "$mode" = "auto" ] && mode="$(kvm_verdict)"
	if [ "$mode" = "kvm" ]; then
		ACCEL_ARGS=(-accel kvm -cpu "${CPU:-host}")
	else
		ACCEL_ARGS=(-accel tcg,thread=multi -cpu "${CPU:-$DEFAULT_TCG_CPU}")
	fi
	ACCEL="$mode"
}

prepare_work() {
	WORK="$(mktemp -d "${TMPDIR:-/tmp}/ztbp-vm.XXXXXX")"
	[ -n "$CTL_DIR" ] || CTL_DIR="$WORK/ctl"
	mkdir -p "$CTL_DIR"
	STOP_FILE="$CTL_DIR/stop"
	if [ -z "$OUTDIR" ]; then
		OUTDIR="$(mktemp -d "${TMPDIR:-/tmp}/ztbp-out.XXXXXX")"
	fi
	mkdir -p "$OUTDIR"
	OUTDIR="$(cd "$OUTDIR" && pwd)"
	write_command "$CTL_DIR"
	[ "$INTERACTIVE" -eq 1 ] && touch "$CTL_DIR/interactive"
	[ "$NO_ZNS" -eq 1 ] && touch "$CTL_DIR/no-nvme"
	return 0
}

write_command() { # DIR: COMMAND, its variables and files, as the guest reads them from /ztbp/ctl
	local dir="$1" e f
	printf '%s\n' "$COMMAND" > "$dir/cmd"
	: > "$dir/env"
	for e in "${ENVS[@]}"; do
		printf '%s=%q\n' "${e%%=*}" "${e#*=}" >> "$dir/env"
	done
	for f in "${FILES[@]}"; do
		cp "$f" "$dir/"
	done
}

# Sizes in QEMU syntax (32M, 1G, 4096) to bytes.
to_bytes() {
	local v="$1" n unit
	n="${v%[KkMmGgTt]}"
	unit="${v:${#n}}"
	[[ "$n" =~ ^[0-9]+$ ]] || die "bad size '$v' (use e.g. 32M, 1G)"
	case "$unit" in
		"") echo "$n" ;;
		[Kk]) echo $((n << 10)) ;;
		[Mm]) echo $((n << 20)) ;;
		[Gg]) echo $((n << 30)) ;;
		[Tt]) echo $((n << 40)) ;;
	esac
}

# The emulated NVMe controller with a zoned namespace (nsid 1) and an optional conventional one (nsid 2).
build_nvme_args() {
	[ "$NO_ZNS" -eq 1 ] && return 0
	local zone_bytes cap_bytes disk_bytes
	zone_bytes="$(to_bytes "$ZONE_SIZE")" || exit 2
	cap_bytes="$(to_bytes "${ZONE_CAP:-$ZONE_SIZE}")" || exit 2
	[ $((zone_bytes % LBA_SIZE)) -eq 0 ] || die "--zone-size must be a multiple of the LBA size $LBA_SIZE"
	[ "$cap_bytes" -le "$zone_bytes" ] || die "--zone-cap ($ZONE_CAP) must not exceed --zone-size ($ZONE_SIZE)"
	disk_bytes=$((zone_bytes * ZONES))
	truncate -s "$disk_bytes" "$WORK/zns.img"
	local ns="nvme-ns,drive=zns0,bus=nvme0,nsid=1,logical_block_size=$LBA_SIZE,physical_block_size=$LBA_SIZE"
	ns+=",zoned=true,zoned.zone_size=$zone_bytes,zoned.zone_capacity=$cap_bytes"
	ns+=",zoned.max_open=$MAX_OPEN,zoned.max_active=$MAX_ACTIVE"
	NVME_ARGS+=(
		-drive "file=$WORK/zns.img,if=none,id=zns0,format=raw,cache=unsafe"
		-device nvme,serial=ztbp0001,id=nvme0
		-device "$ns"
	)
	if [ -n "$CONV_SIZE" ]; then
		local conv_bytes
		conv_bytes="$(to_bytes "$CONV_SIZE")" || exit 2
		truncate -s "$conv_bytes" "$WORK/conv.img"
		NVME_ARGS+=(
			-drive "file=$WORK/conv.img,if=none,id=conv0,format=raw,cache=unsafe"
			-device "nvme-ns,drive=conv0,bus=nvme0,nsid=2,logical_block_size=$LBA_SIZE,physical_block_size=$LBA_SIZE"
		)
	fi
}

kernel_cmdline() {
	local cmdline="console=ttyS0 root=/dev/vda rw init=/sbin/ztbp-init panic=-1 quiet loglevel=4"
	cmdline+=" mitigations=off nokaslr tsc=reliable"
	# QEMU 10's controller says its namespaces may be shared (CMIC/NMIC); a 6.1 guest then puts a multipath head disk
	# over the zoned namespace that reads its open and active zone limits as 0, and zoned btrfs on it oopses. One
	# path per namespace is all this VM has: no head disk (harmless on QEMU 7.2, which does not say so).
	cmdline+=" nvme_core.multipath=N"
	[ -n "$APPEND_EXTRA" ] && cmdline+=" $APPEND_EXTRA"
	echo "$cmdline"
}

run_qemu() {
	# One QEMU flag per line.
	local args=(
		-name ztbp-guest
		-machine q35
		"${ACCEL_ARGS[@]}"
		-smp "$SMP"
		-m "$MEMORY"
		-nodefaults
		-display none
		-no-reboot
		-nic none
		-kernel "$IMAGE_DIR/vmlinuz"
		-initrd "$IMAGE_DIR/initrd.img"
		-append "$(kernel_cmdline)"
		-drive "file=$IMAGE_DIR/rootfs.ext4,if=virtio,format=raw,snapshot=on"
		-virtfs "local,path=$REPO,mount_tag=ztbp_src,security_model=none,readonly=on"
		# the repository once more, for guest/boot.sh to mount over /ztbp/src with the guest's cache on (ztbp-init,
		# part of the image, mounts ztbp_src without it; a 9p tag mounts once)
		-virtfs "local,path=$REPO,mount_tag=ztbp_src_cached,security_model=none,readonly=on"
		-virtfs "local,path=$OUTDIR,mount_tag=ztbp_out,security_model=none"
		-virtfs "local,path=$CTL_DIR,mount_tag=ztbp_ctl,security_model=none"
		-chardev "stdio,id=con0,signal=off,logfile=$OUTDIR/console.log"
		-serial chardev:con0
		"${NVME_ARGS[@]}"
	)
	[ -n "$SHARE_DIR" ] && args+=(-virtfs "local,path=$SHARE_DIR,mount_tag=ztbp_share,security_model=none")
	if [ "$INTERACTIVE" -eq 1 ]; then
		"$QEMU" "${args[@]}"
		return
	fi
	local sink=/dev/stdout
	[ "$QUIET" -eq 1 ] && sink=/dev/null
	# Own session: a Ctrl-C on the terminal reaches this script (which stops the guest cleanly), not QEMU.
	setsid "$QEMU" "${args[@]}" </dev/null >"$sink" 2>&1 &
	QEMU_PID=$!
	trap on_interrupt INT
	trap on_terminate TERM HUP
	wait_for_guest
}

on_interrupt() {
	if [ "$STOP_REQUESTED" -eq 0 ]; then
		STOP_REQUESTED=1
		log "interrupted: asking $RUN_NAME to stop and save its data (up to $STOP_GRACE s; again to kill)"
		touch "$STOP_FILE"
	else
		log "killing $GUEST_NAME"
		"$KILL_GUEST"
	fi
}

on_terminate() {
	log "terminated: killing $GUEST_NAME"
	"$KILL_GUEST"
	exit 143
}

kill_qemu() { kill -KILL "$QEMU_PID" 2>/dev/null || true; }

supervise() { # RUNNING: wait while the command RUNNING succeeds, killing the guest when the timeout passes (then
	# return 1) or when a stop asked for (Ctrl-C) is not done within STOP_GRACE; in this shell, so the traps run
	local running="$1" start=$SECONDS stop_at=""
	while "$running"; do
		if [ $((SECONDS - start)) -ge "$TIMEOUT" ]; then
			log "timeout after $TIMEOUT s: killing $GUEST_NAME (what it wrote to $OUTDIR stays)"
			"$KILL_GUEST"
			return 1
		fi
		if [ "$STOP_REQUESTED" -eq 1 ]; then
			[ -z "$stop_at" ] && stop_at=$SECONDS
			if [ $((SECONDS - stop_at)) -ge "$STOP_GRACE" ]; then
				log "$RUN_NAME did not stop within $STOP_GRACE s: killing $GUEST_NAME"
				"$KILL_GUEST"
			fi
		fi
		sleep 0.2
	done
}

qemu_running() { kill -0 "$QEMU_PID" 2>/dev/null; }

wait_for_guest() {
	supervise qemu_running || echo "$EXIT_TIMEOUT" > "$WORK/timed-out"
	wait "$QEMU_PID" 2>/dev/null || true
}

guest_status() {
	if [ -f "$WORK/timed-out" ]; then
		echo "$EXIT_TIMEOUT"
	elif [ -s "$CTL_DIR/exit-status" ]; then
		head -n 1 "$CTL_DIR/exit-status"
	else
		echo "$EXIT_NO_STATUS"
	fi
}

cleanup() {
	if [ -n "$QEMU_PID" ]; then
		kill -KILL "$QEMU_PID" 2>/dev/null || true
	fi
	if [ -n "$WORK" ]; then
		rm -rf "$WORK"
	fi
}

# ---- the guest pool (ZTBP_GUEST_POOL): one booted guest per configuration serves many commands ----------------
pool_wanted() {
	[ -n "$POOL" ] && [ -n "$POOL_SHARE" ] && [ -n "$OUTDIR" ] && [ "$INTERACTIVE" -eq 0 ] || return 1
	mkdir -p "$OUTDIR" "$POOL"
	OUTDIR="$(cd "$OUTDIR" && pwd -P)"
	POOL_SHARE="$(cd "$POOL_SHARE" && pwd -P)"
	case "$OUTDIR/" in
		"$POOL_SHARE"/*/) return 0 ;;
	esac
	log "pool: $OUTDIR is not inside $POOL_SHARE: booting a guest of its own"
	return 1
}

pool_config() { # what makes two commands able to share a guest
	printf 'repo=%s\nimage=%s\naccel=%s\ncpu=%s\nsmp=%s\nmemory=%s\nno_zns=%s\nappend=%s\n' \
		"$REPO" "$IMAGE_DIR" "$ACCEL" "$CPU" "$SMP" "$MEMORY" "$NO_ZNS" "$APPEND_EXTRA"
	# sizes in bytes: 32M and 33554432 are one device
	[ "$NO_ZNS" -eq 1 ] || printf 'zone_size=%s\nzones=%s\nzone_cap=%s\nmax_open=%s\nmax_active=%s\nlba=%s\nconv=%s\n' \
		"$(to_bytes "$ZONE_SIZE")" "$ZONES" "$(to_bytes "${ZONE_CAP:-$ZONE_SIZE}")" "$MAX_OPEN" "$MAX_ACTIVE" \
		"$LBA_SIZE" "$([ -z "$CONV_SIZE" ] || to_bytes "$CONV_SIZE")"
}

pool_alive() { # KDIR: its guest runs and said it is ready
	local pid
	pid="$(cat "$1/pid" 2>/dev/null)" || return 1
	kill -0 "$pid" 2>/dev/null && [ -e "$1/ctl/ready" ]
}

pool_kill() { # KDIR: stop its guest (vmtest.sh kills QEMU on SIGTERM) and wait until it is gone
	local pid i
	pid="$(cat "$1/pid" 2>/dev/null)" || return 0
	kill -TERM "$pid" 2>/dev/null || true
	for i in $(seq 1 100); do
		kill -0 "$pid" 2>/dev/null || break
		sleep 0.1
	done
	kill -KILL -- "-$pid" 2>/dev/null || true
	rm -f "$1/pid" "$1/qemu.pid"
}

follow() { # FILE: echo its lines as they come (not with --quiet)
	[ "$QUIET" -eq 1 ] && return 0
	tail -n +1 -F -s 0.2 "$1" 2>/dev/null &
	TAIL_PID=$!
}

unfollow() {
	[ -n "$TAIL_PID" ] || return 0
	sleep 0.3  # the last lines
	kill "$TAIL_PID" 2>/dev/null || true
	wait "$TAIL_PID" 2>/dev/null || true
	TAIL_PID=""
}

pool_make_room() { # KDIR: stop the least recently used other guests until one more may be booted
	local k alive=()
	for k in $(ls -td "$POOL"/*/ 2>/dev/null); do  # newest use first
		k="${k%/}"
		[ "$k" != "$1" ] && [ -e "$k/pid" ] && kill -0 "$(cat "$k/pid")" 2>/dev/null && alive+=("$k")
	done
	while [ "${#alive[@]}" -ge "$POOL_MAX" ]; do
		k="${alive[-1]}"
		unset 'alive[-1]'
		# never one running a command (its lock is held)
		if ( flock -n 8 || exit 1; pool_kill "$k" ) 8>"$k/lock"; then
			log "pool: stopped the guest least recently used ($(basename "$k")) to make room"
		fi
	done
}

pool_boot() { # KDIR: boot its guest; 0 once it is ready
	local kdir="$1" attempt start pid size new quiet_since kept last silent
	local args=(-q -i "$IMAGE_DIR" -o "$kdir/console" -t "$POOL_LIFETIME" --ctl-dir "$kdir/ctl"
		--share "$POOL_SHARE" -m "$MEMORY" -s "$SMP" --accel "$ACCEL" --cpu "$CPU" --env "ZTBP_POOL_IDLE=$POOL_IDLE")
	if [ "$NO_ZNS" -eq 1 ]; then
		args+=(--no-zns)
	else
		args+=(--zone-size "$ZONE_SIZE" --zones "$ZONES" --max-open "$MAX_OPEN" --max-active "$MAX_ACTIVE"
			--lba-size "$LBA_SIZE")
		[ -n "$ZONE_CAP" ] && args+=(--zone-cap "$ZONE_CAP")
		[ -n "$CONV_SIZE" ] && args+=(--conv-ns "$CONV_SIZE")
	fi
	# a verbose boot on the pool's own console (pool.sh quiets it once up): a boot that hangs shows where, and
	# is seen in seconds, not when the wait runs out
	args+=(--append "${APPEND_EXTRA:+$APPEND_EXTRA }loglevel=7")
	pool_make_room "$kdir"
	for attempt in 1 2; do
		pool_kill "$kdir"
		rm -rf "$kdir/ctl" "$kdir/console"
		mkdir -p "$kdir/ctl/jobs" "$kdir/console"
		: > "$kdir/console/console.log"
		log "pool: booting a guest to keep ($ACCEL, $SMP CPUs, $MEMORY; attempt $attempt); console -> $kdir/console/console.log"
		ZTBP_GUEST_POOL="" setsid bash "$REPO/vm/vmtest.sh" "${args[@]}" -- "bash /ztbp/src/vm/guest/pool.sh" \
			</dev/null >"$kdir/boot.log" 2>&1 9>&- &
		pid=$!
		echo "$pid" > "$kdir/pid"
		echo "boot $(date -u +%FT%TZ) $ACCEL attempt $attempt" >> "$POOL/boots"
		follow "$kdir/console/console.log"
		start=$SECONDS
		size=0
		quiet_since=$SECONDS
		while :; do
			new="$(stat -c %s "$kdir/console/console.log" 2>/dev/null || echo 0)"
			[ "$new" != "$size" ] && size="$new" && quiet_since=$SECONDS
			if [ -e "$kdir/ctl/ready" ]; then
				unfollow
				pool_qemu "$kdir"
				echo "boot $(basename "$kdir") $((SECONDS - start)) $(qemu_cpu "$kdir")" >> "$POOL/seconds"
				return 0
			fi
			if ! kill -0 "$pid" 2>/dev/null; then
				unfollow
				log "pool: the guest stopped before it was ready: $(tail -n 3 "$kdir/boot.log" | tr '\n' ' ')"
				return "$EXIT_NO_STATUS"
			fi
			if [ $((SECONDS - quiet_since)) -ge $((size > 0 ? POOL_SILENT : 2 * POOL_SILENT)) ]; then
				# the next attempt starts a new console: this one is kept beside hung-boots, its last line quoted there
				kept="hung-$(basename "$kdir")-$attempt.log" silent=$((SECONDS - quiet_since))
				last="$(tail -n 1 "$kdir/console/console.log" 2>/dev/null | tr -cd '[:print:]' | cut -c1-160)"
				cp "$kdir/console/console.log" "$POOL/$kept" 2>/dev/null || true
				echo "hung $(date -u +%FT%TZ) silent for $silent s after $size bytes, attempt $attempt" \
					"(console: $kept; last line: $last)" >> "$POOL/hung-boots"
				log "pool: the guest's boot printed nothing new in $silent s (a hung boot; its last line: $last): killing it"
				break
			fi
			if [ $((SECONDS - start)) -ge "$POOL_BOOT_WAIT" ]; then
				unfollow
				pool_kill "$kdir"
				log "pool: the guest was not ready within $POOL_BOOT_WAIT s; see $kdir/console/console.log"
				return "$EXIT_TIMEOUT"
			fi
			sleep 0.2
		done
		unfollow
	done
	pool_kill "$kdir"
	return "$EXIT_NO_STATUS"
}

pool_cleanup() {
	[ -n "$TAIL_PID" ] && kill "$TAIL_PID" 2>/dev/null
	[ -n "$JOB" ] && rm -rf "$JOB"
	return 0
}

kill_pooled() { pool_kill "$KDIR"; }

pool_qemu() { # KDIR: the pid of its guest's QEMU (a child of the booting vmtest.sh, named qemu-system-*) into
	# KDIR/qemu.pid, for its CPU time (qemu_cpu)
	local pid children child comm
	pid="$(cat "$1/pid" 2>/dev/null)" || return 0
	children="$(cat "/proc/$pid/task/$pid/children" 2>/dev/null)" || return 0  # (CONFIG_PROC_CHILDREN)
	for child in $children; do
		read -r comm 2>/dev/null < "/proc/$child/comm" || continue
		[[ "$comm" == qemu-system* ]] && { echo "$child" > "$1/qemu.pid"; return 0; }
	done
	return 0
}

qemu_cpu() { # KDIR: the CPU seconds (user + system, every thread) its guest's QEMU has used so far; "?" unknown.
	# Under TCG a guest's work is its QEMU's CPU time: on a busy machine the measure of a command's cost that wall
	# time is not
	local pid ticks
	pid="$(cat "$1/qemu.pid" 2>/dev/null)" || { echo "?"; return 0; }
	ticks="$(awk '{print $14 + $15}' "/proc/$pid/stat" 2>/dev/null)" || ticks=""
	[ -n "$ticks" ] && echo $((ticks / $(getconf CLK_TCK))) || echo "?"
}

cpu_since() { # BEFORE AFTER: AFTER - BEFORE, "?" when either is unknown
	[[ "$1" =~ ^[0-9]+$ && "$2" =~ ^[0-9]+$ ]] && echo $(($2 - $1)) || echo "?"
}

pool_running() { kill -0 "$POOL_PID" 2>/dev/null && [ ! -s "$JOB/exit-status" ]; }

pool_wait() { # wait for the job's status, into RC
	POOL_PID="$(cat "$KDIR/pid")"
	if ! supervise pool_running; then
		RC=$EXIT_TIMEOUT
	elif [ -s "$JOB/exit-status" ]; then
		RC="$(head -n 1 "$JOB/exit-status")"
	else
		log "pool: the pooled guest stopped during the command (see $KDIR/console/console.log)"
		RC=$EXIT_NO_STATUS
	fi
}

pool_main() {
	choose_accel
	local key start cpu
	key="$(pool_config | sha256sum | cut -c1-12)"
	KDIR="$POOL/$key"
	mkdir -p "$KDIR"
	pool_config > "$KDIR/config"
	touch "$KDIR"  # last used (pool_make_room)
	exec 9>"$KDIR/lock"
	flock 9  # one command at a time in a guest
	KILL_GUEST=kill_pooled GUEST_NAME="the pooled guest" RUN_NAME="the command"
	trap pool_cleanup EXIT
	trap on_interrupt INT
	trap on_terminate TERM HUP
	if ! pool_alive "$KDIR"; then
		pool_boot "$KDIR" || return $?
	fi
	JOB="$KDIR/ctl/jobs/$(date +%s%N)-$$"
	mkdir -p "$JOB"
	write_command "$JOB"
	printf '%s\n' "${OUTDIR#"$POOL_SHARE"/}" > "$JOB/out"
	STOP_FILE="$JOB/stop"
	: > "$OUTDIR/console.log"
	start=$SECONDS
	cpu="$(qemu_cpu "$KDIR")"
	log "running in the pooled guest $key ($ACCEL, $SMP CPUs, $MEMORY); console -> $OUTDIR/console.log"
	echo "job $(date -u +%FT%TZ) $key ${OUTDIR#"$POOL_SHARE"/}" >> "$POOL/jobs"
	follow "$OUTDIR/console.log"
	touch "$JOB/go"
	pool_wait
	unfollow
	echo "job $key ${OUTDIR#"$POOL_SHARE"/} $((SECONDS - start)) $RC $(cpu_since "$cpu" "$(qemu_cpu "$KDIR")")" \
		>> "$POOL/seconds"
	# the command's stage lines with the guest's uptime (vm/guest/probe-lib.sh say), kept past the job's folder
	if [ -s "$JOB/stages.log" ]; then
		local line
		while IFS= read -r line; do printf '%s %s %s\n' "$key" "${OUTDIR#"$POOL_SHARE"/}" "$line"; done \
			< "$JOB/stages.log" >> "$POOL/stages" || true
	fi
	log "guest finished in $((SECONDS - start)) s with status $RC; output in $OUTDIR"
	return "$RC"
}

main() {
	parse_args "$@"
	check_deps
	ensure_image
	if pool_wanted; then
		pool_main
		return
	fi
	prepare_work
	trap cleanup EXIT
	build_nvme_args
	choose_accel
	log "booting ($ACCEL, $SMP CPUs, $MEMORY); console -> $OUTDIR/console.log"
	local start=$SECONDS
	run_qemu
	local rc
	rc="$(guest_status)"
	log "guest finished in $((SECONDS - start)) s with status $rc; output in $OUTDIR"
	return "$rc"
}

main "$@"
