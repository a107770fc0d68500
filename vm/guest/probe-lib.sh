#!/bin/bash
# probe-lib.sh - the guest scripts' one library, sourced by capture.sh, layers-capture.sh, app-capture.sh,
# bench.sh, loop.sh and profile.sh. The one way they run a bpftrace probe: size its maps, start it, wait (bounded) until it is attached, let a streaming probe drain,
# stop it with bounded retries, turn its output into a CSV and account for every event it lost. Also the facts
# every capture records (versions, device geometry), a device module's loading (NVMeVirt) and the ways of
# talking to the host: "ZTBP:" progress lines on the console, NAME=VALUE lines in $TMP/guest.env (copied to
# OUT/.capture/guest.env; the host's ztbp.acquire.capture turns them into meta.json), and the mailbox (files the
# host posts and the guest answers in the shared folder, each written whole; the host's half is
# ztbp/io/mailbox.py).
#
# The caller sets TMP (a work folder) first. A probe has a NAME, the probe name of its CSV (nvme, layers): its
# output starts with "# ztbp NAME v1" once every probe point is attached, and it ends up in $TMP/NAME.csv.
#
#   probe_start NAME SCRIPT KEYS [ARGS...]   start bpftrace SCRIPT ARGS, wait until attached (KEYS: its map
#                                          size, BPFTRACE_MAP_KEYS_MAX; 0 = bpftrace's default)
#                                          (one at a time: two bpftraces attaching at once locked up the guest
#                                          kernel under TCG, both CPUs in soft lockups, seen once)
#   probe_stop NAME                        drain (streaming probes), stop, write $TMP/NAME.csv, account for
#                                          losses (sets PROBE_ROWS, PROBE_LOST)
#   probe_map_keys NAME EXPECTED BYTES     sets PROBE_KEYS, the map size for EXPECTED (see MAP SIZE)
#   probe_counter NAME COUNTER             the last value the probe printed for @COUNTER
#
# MAP SIZE: BPFTRACE_MAP_KEYS_MAX = EXPECTED * 3 / 2 + 50000, where EXPECTED is what the probe's largest map must
# hold (the rows of nvme_zone.bt, which keeps every command until it stops; the requests in flight at once for
# probes that forget a request when it ends). ZTBP_MAX_ROWS, when set, is the size itself. The size is capped
# at a quarter of the memory available (bpftrace preallocates every map for all its keys).
#
# LOSS RULE (every probe, guest.env probe_NAME_* and lost_events_NAME):
#   lost = unprinted + unmatched + dropped
#   unprinted  rows the kernel side emitted but that never reached the file: max(@completed - rows, "Lost N
#              events" of bpftrace's perf buffer, which also covers events still in it when bpftrace stopped)
#              (rows: those in the file plus PROBE_TAKEN[NAME], rows a caller took out of a map probe's
#              map while it ran: the loop's rounds)
#   unmatched  @setups - @completed when the probe counts submissions itself; otherwise the runs of its programs
#              the kernel skipped (fdinfo recursion_misses), each possibly a command or request without a row
#   dropped    @lost + @unsure, the requests a probe counted as having no row (probes/layers.bt: state it could
#              not store; @unsure: calls it counted before knowing whether they reach the device, an upper bound)
# STOP RULE: SIGINT once; again every 5 s while bpftrace uses no CPU or still waits in its event loop (epoll_wait):
# it has been seen to miss one and sit there, under emulation waking often enough to use some CPU every second (an
# appops probe so took 529 and 649 s to exit); a second SIGINT while it prints a map would kill it, and it prints
# outside epoll_wait. After PROBE_STOP_IDLE s without CPU or
# PROBE_STOP_TIMEOUT s in all, SIGTERM, then SIGKILL after PROBE_KILL_WAIT s. A probe whose counters were not
# printed (killed) fails the capture: its losses are unknown.

PROBE_ATTACH_TIMEOUT=300     # s for bpftrace to compile and attach (tens of seconds under TCG)
PROBE_DRAIN_TIMEOUT=900      # s a streaming probe may take to write its backlog
PROBE_DRAIN_STILL=3          # s its output must stay the same size to count as drained
PROBE_RESIGNAL_IDLE=5        # s without CPU after which SIGINT is sent again
PROBE_STOP_IDLE=120          # s without CPU after SIGINT before giving up on a clean exit
PROBE_STOP_TIMEOUT=1800      # s in all for the clean exit (a map of millions of rows prints for minutes)
PROBE_KILL_WAIT=5            # s between SIGTERM and SIGKILL
PROBE_EXIT_TELL=30           # s after SIGINT from which a probe still exiting is described, then every 120 s
PROBE_RB_PAGES="${ZTBP_RB_PAGES:-32768}"   # perf buffer pages per CPU of a streaming probe (128 MiB)
MAP_KEYS_SPARE=50000         # room beyond 1.5 x the expected count (split I/O, other processes, leftovers)
MAP_MEMORY_SHARE=4           # maps may take 1 / this of the memory available

PROBE_LIB_SRC="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
declare -A PROBE_PID=() PROBE_MODE=() PROBE_TAKEN=()   # PROBE_TAKEN: rows a caller took out of a map probe's map
STATUS="${STATUS:-complete}"

# ---- settings every guest script shares (the host sets them through ZTBP_*) -------------------------------------
SRC="$PROBE_LIB_SRC"                          # the repository (/ztbp/src in the VM)
OUT="${ZTBP_OUT:-/ztbp/out}"                  # the folder shared with the host: a run, loop or profile directory
DEV="${ZTBP_DEV:-/dev/nvme0n1}"               # the zoned namespace traced or measured
STOP_FILE="${ZTBP_STOP_FILE:-/ztbp/ctl/stop}" # the host creates it to stop early (Ctrl-C)

# settings NAME=DEFAULT ...: a script's own settings, each NAME from $ZTBP_NAME when that is set and not empty,
# else DEFAULT (NAME:VAR=DEFAULT reads $ZTBP_VAR instead, for a NAME that differs from the host's variable)
settings() {
	local kv name var
	for kv in "$@"; do
		name="${kv%%=*}"
		var="ZTBP_${name#*:}"
		printf -v "${name%%:*}" '%s' "${!var:-${kv#*=}}"
	done
}

say() { # a progress line; with ZTBP_STAGE_LOG set (the guest pool: its job folder), also there after the guest's
	# uptime, so a command's stages can be timed afterwards (builtins only)
	echo "ZTBP: $*"
	[ -n "${ZTBP_STAGE_LOG:-}" ] || return 0
	local up
	read -r up _ < /proc/uptime && { echo "$up $*" >> "$ZTBP_STAGE_LOG"; } 2> /dev/null
	return 0
}
info() { echo "$1=$2" >> "$TMP/guest.env"; }
die() { say "error $*"; STATUS="failed"; exit 1; }

# ---- waiting without forks -------------------------------------------------------------------------------------
# A fork costs ~60 ms under TCG: a wait of `grep; sleep 0.2` for a probe's header cost a third of the guest's CPU
# seconds of the probe's attach (layers.bt 51 and 47 CPU-s against 26 and 31 waiting with builtins;
# nvme_zone_stream.bt 46 and 54 against 38 and 40), seconds that bpftrace's compile, the workload and the other
# guests on the host then lacked. The waits of the guest scripts poll with builtins.

nap() { # SECONDS: a sleep without a fork: read -t on a FIFO nobody writes to (`sleep` where none can be made)
	if [ -z "${NAP_FD:-}" ]; then
		local fifo="${TMPDIR:-/tmp}/.ztbp-nap.$$.$RANDOM"
		if mkfifo "$fifo" 2> /dev/null && exec {NAP_FD}<> "$fifo"; then rm -f "$fifo"; else NAP_FD=none; fi
	fi
	if [ "$NAP_FD" = none ]; then sleep "$1"; else read -r -t "$1" -u "$NAP_FD" _ 2> /dev/null || true; fi
}

lines_matching() { # FILE PATTERN: sets MATCHED, the number of FILE's lines that match the glob PATTERN (builtins
	# only: for small files, such as a probe's output before its header or a watch journal)
	local l
	MATCHED=0
	[ -r "$1" ] || return 0
	# shellcheck disable=SC2053  # PATTERN is a glob
	while IFS= read -r l || [ -n "$l" ]; do [[ $l == $2 ]] && MATCHED=$((MATCHED + 1)); done < "$1"
	return 0
}

has_line() { # FILE PATTERN: whether a line of FILE matches the glob PATTERN (builtins only; small files)
	local l
	[ -r "$1" ] || return 1
	# shellcheck disable=SC2053  # PATTERN is a glob
	while IFS= read -r l || [ -n "$l" ]; do [[ $l == $2 ]] && return 0; done < "$1"
	return 1
}

# ---- facts of the traced machine ----------------------------------------------------------------------------

versions() { # NAME=VALUE lines: the traced machine's Debian suite and release (empty elsewhere, e.g. "trixie" and
	# "13"), kernel and tools
	echo "suite=$(. /etc/os-release 2>/dev/null; echo "${VERSION_CODENAME:-}")"
	echo "debian=$(. /etc/os-release 2>/dev/null; echo "${VERSION_ID:-}")"
	echo "kernel=$(uname -r)"
	echo "kernel_version=$(uname -v)"
	echo "bpftrace=$(bpftrace --version 2>&1 | head -n 1)"
	echo "fio=$(fio --version 2>&1 | head -n 1)"
	echo "nvme_cli=$(nvme version 2>&1 | head -n 1)"
	echo "blkzone=$(blkzone --version 2>&1 | head -n 1)"
}

record_versions() { # versions into guest.env; with ZTBP_VERSIONS_CACHE (the guest pool: a file of its boot), asked
	# once per boot (each command's first seconds went to starting bpftrace and fio only to print their versions)
	local cache="${ZTBP_VERSIONS_CACHE:-}" line
	if [ -z "$cache" ]; then
		versions >> "$TMP/guest.env"
		return 0
	fi
	[ -s "$cache" ] || { versions > "$cache.tmp" && mv "$cache.tmp" "$cache"; } 2> /dev/null
	if [ -s "$cache" ]; then
		while IFS= read -r line; do echo "$line"; done < "$cache" >> "$TMP/guest.env"
	else
		versions >> "$TMP/guest.env"  # the boot's file could not be written: asked again
	fi
}

sys_queue() { # DEV ATTR [DEFAULT]
	cat "/sys/block/$(basename "$1")/queue/$2" 2>/dev/null || echo "${3:-}"
}

namespace_dev() { # NSID [FALLBACK]: the block device of namespace NSID of controller nvme0. Linux 6.12 scans
	# namespaces in parallel, so the disk names (nvme0n1, nvme0n2: the order the kernel found them) need not follow
	# the namespace ids (QEMU: 1 zoned, 2 conventional); sysfs "nsid" is the device's own id.
	local d
	for d in "${SYS_BLOCK:-/sys/block}"/nvme0n*; do
		[ "$(cat "$d/nsid" 2>/dev/null)" = "$1" ] && { echo "/dev/${d##*/}"; return 0; }
	done
	echo "${2:-/dev/nvme0n$1}"
}

device_facts() { # DEV: its name, zoned model and geometry from sysfs as NAME=VALUE lines
	echo "device=$(basename "$1")"
	echo "zoned=$(sys_queue "$1" zoned none)"
	echo "lba_bytes=$(sys_queue "$1" logical_block_size)"
	echo "zone_sectors=$(sys_queue "$1" chunk_sectors)"
	echo "nr_zones=$(sys_queue "$1" nr_zones 0)"
	echo "max_open_zones=$(sys_queue "$1" max_open_zones 0)"
	echo "max_active_zones=$(sys_queue "$1" max_active_zones 0)"
}

stack_namespaces() { # ZNS and CONV: vm/vmtest.sh's zoned namespace (nsid 1) and conventional one (nsid 2,
	# --conv-ns); MNT: where a file system built on them is mounted
	ZNS="$(namespace_dev 1)"
	CONV="$(namespace_dev 2)"
	MNT=/mnt/ztbp
}

record_device() { # DEV: refuse a device that is not zoned, record its geometry
	local dev="$1" zoned
	[ -b "$dev" ] || { say "error $dev is not a block device"; return 1; }
	zoned="$(sys_queue "$dev" zoned none)"
	[ "$zoned" = "host-managed" ] || [ "$zoned" = "host-aware" ] || {
		say "error $dev is not zoned (queue/zoned = $zoned)"; return 1; }
	device_facts "$dev" >> "$TMP/guest.env"
	info zone_cap_sectors "$(zone_cap_sectors "$dev")"
}

zone_cap_sectors() { # DEV: the capacity of its first zone in 512-byte sectors (blkzone report: "cap 0x...")
	echo "$(( $(blkzone report -c 1 "$1" | sed -n 's/.*cap \(0x[0-9a-f]*\).*/\1/p') ))"
}

# ---- a device module (NVMeVirt) --------------------------------------------------------------------------
# NVMeVirt's busy-polling threads hold off RCU-tasks grace periods, which fentry/kfunc programs need to attach and
# to detach: with the module loaded, bpftrace hangs attaching or stopping. So: module_prepare (the nvme driver,
# whose nvme_core functions the probes attach to) -> probe_start -> module_load -> ... -> module_unload ->
# probe_stop. The guest has no udev: the nvme driver is loaded by hand and binds the module's device when it appears.

module_prepare() { # load the nvme driver before any probe attaches (only when a module ZTBP_KO will be loaded)
	[ -n "${ZTBP_KO:-}" ] || return 0
	modprobe nvme || { say "error modprobe nvme failed"; return 1; }
}

driver_gave_up() { # how many times the kernel log says the nvme driver gave up on a device before it was ready
	dmesg | grep -c 'Device not ready; aborting initialisation'
}

module_load() { # DEV: insmod ZTBP_KO with ZTBP_KO_PARAMS, wait until DEV appears (ZTBP_MODULE_WAIT_S, default 60);
	# once more as soon as the nvme driver gives up on the device before it was ready ("Device not ready; aborting
	# initialisation, CSTS=0x0": NVMeVirt's controller thread came late under emulation; in a fresh-clone run the
	# kernel said so 1 s after insmod, and the wait went on for its whole 60 s before the second insmod)
	[ -n "${ZTBP_KO:-}" ] || return 0
	local dev="$1" i attempt gave_up wait_s="${ZTBP_MODULE_WAIT_S:-60}" failed
	for attempt in 1 2; do
		gave_up="$(driver_gave_up)"
		say "stage module insmod $(basename "$ZTBP_KO") ${ZTBP_KO_PARAMS:-}"
		# shellcheck disable=SC2086  # the parameters are separate words
		insmod -- "$ZTBP_KO" ${ZTBP_KO_PARAMS:-} || { say "error insmod failed (see console.log)"; return 1; }
		MODULE_LOADED=1
		failed=""
		for ((i = 1; i <= wait_s * 10; i++)); do
			[ -b "$dev" ] && { info module_appear_s "$((i / 10))"; info module_load_attempts "$attempt"; return 0; }
			# the kernel log once a second (two forks: ~0.1 s under emulation)
			if ((i % 10 == 0)) && [ "$(driver_gave_up)" -gt "$gave_up" ]; then
				failed=1
				break
			fi
			nap 0.1
		done
		[ "$attempt" -eq 1 ] && [ -n "$failed" ] || break
		say "stage module the nvme driver gave up on the device before it was ready ($((i / 10)) s after insmod):" \
			"rmmod and insmod again"
		rmmod -- "$(basename "$ZTBP_KO" .ko)" || break
		MODULE_LOADED=""
	done
	if [ -n "$failed" ]; then
		say "error the nvme driver gave up on $dev again ($((i / 10)) s after loading the module); see dmesg"
	else
		say "error $dev did not appear within $wait_s s after loading the module"
	fi
	return 1
}

device_bring_up() { # DEV START: the probe started (the function START) and attached, then DEV made to appear (a
	# module, ZTBP_KO, loads only now), then DEV checked zoned and its geometry recorded. The one bring-up order of
	# every script that traces a device a module may make (capture.sh, loop.sh).
	local dev="$1" start="$2"
	module_prepare || return 1
	"$start" || return 1
	module_load "$dev" || return 1
	record_device "$dev"
}

module_unload() { # rmmod the module loaded by module_load (before any probe is stopped)
	[ -n "${MODULE_LOADED:-}" ] || return 0
	local name
	name="$(basename "$ZTBP_KO" .ko)"
	say "stage module rmmod $name (before bpftrace stops: its detach needs the module's threads gone)"
	sync
	rmmod -- "$name" || say "error rmmod $name failed"
	MODULE_LOADED=""
}

# ---- the mailbox: files exchanged with the host through the shared folder ----------------------------------------
# The host posts messages whole (renamed into place); the guest waits for them and answers with files it writes
# whole the same way, so neither side reads half a file. The loop: .loop/job-NN.fio and .loop/decision-NN posted,
# .loop/*.env answered; the profiler: numbered requests REQ/NNNNN.KIND answered with RES/NNNNN.rc (and what else
# the request produces), REQ/done to finish. Waits end early when STOP_FILE appears.

mailbox_answer() { # FILE: standard input written to FILE whole (under FILE.tmp, then renamed)
	cat > "$1.tmp" && mv "$1.tmp" "$1"
}

mailbox_wait() { # FILE TIMEOUT [WHO]: until the host posts FILE (0), STOP_FILE appears or TIMEOUT s pass (1);
	# WHO (default "stage") starts the progress line it prints when it gives up
	local t0=$SECONDS who="${3:-stage}"
	until [ -f "$1" ]; do
		[ -f "${STOP_FILE:-}" ] && { say "$who stop requested"; return 1; }
		[ $((SECONDS - t0)) -ge "$2" ] && { say "error $who: no $(basename "$1") from the host within $2 s"; return 1; }
		nap "${MAILBOX_POLL_S:-0.5}"
	done
}

mailbox_next() { # REQ RES: NEXT, the first numbered request REQ/NNNNN.KIND without its answer RES/NNNNN.rc, and
	# NEXT_ID, its NNNNN (status 1: none); builtins only, as it is polled
	local f id
	for f in "$1"/*.*; do
		[ -f "$f" ] || continue
		id="${f##*/}"
		id="${id%.*}"
		[ -e "$2/$id.rc" ] || { NEXT="$f"; NEXT_ID="$id"; return 0; }
	done
	return 1
}

mailbox_status() { # RES ID RC: answer request ID with its exit status RC
	echo "$3" | mailbox_answer "$1/$2.rc"
}

# ---- map size -------------------------------------------------------------------------------------------------

map_keys_for() { # EXPECTED -> BPFTRACE_MAP_KEYS_MAX (the formula of MAP SIZE)
	echo $(($1 * 3 / 2 + MAP_KEYS_SPARE))
}

probe_map_keys() { # NAME EXPECTED BYTES_PER_KEY -> PROBE_KEYS, capped by memory; recorded in guest.env
	local name="$1" keys avail_kb cap
	keys="${ZTBP_MAX_ROWS:-$(map_keys_for "$2")}"
	avail_kb="$(awk '/^MemAvailable:/ {print $2}' /proc/meminfo)"
	cap=$((avail_kb * 1024 / MAP_MEMORY_SHARE / $3))
	[ "$cap" -ge 1 ] || cap=1   # (0 would mean bpftrace's default size)
	if [ "$keys" -gt "$cap" ]; then
		say "stage probe $name: room for $cap keys only (1/$MAP_MEMORY_SHARE of the memory available, not the" \
			"$keys asked for): what does not fit is counted as lost"
		keys=$cap
	fi
	info "probe_${name}_max_rows" "$keys"
	# shellcheck disable=SC2034  # the result, read by the caller
	PROBE_KEYS=$keys
}

# ---- start ----------------------------------------------------------------------------------------------------

script_name() { # PATH -> relative to the repository when inside it
	local p
	p="$(realpath "$1")"
	echo "${p#"$PROBE_LIB_SRC"/}"
}

bpftrace_env() { # map_keys|strlen -> the variable's name in this bpftrace: 0.17 (Debian 12) reads
	# BPFTRACE_MAP_KEYS_MAX and BPFTRACE_STRLEN, 0.23 (Debian 13) BPFTRACE_MAX_MAP_KEYS and BPFTRACE_MAX_STRLEN
	# (it warns that the old names are deprecated)
	local new=0
	bpftrace --help 2>&1 | grep -q BPFTRACE_MAX_MAP_KEYS && new=1
	case "$1:$new" in
		map_keys:0) echo BPFTRACE_MAP_KEYS_MAX ;;
		map_keys:1) echo BPFTRACE_MAX_MAP_KEYS ;;
		strlen:0) echo BPFTRACE_STRLEN ;;
		strlen:1) echo BPFTRACE_MAX_STRLEN ;;
	esac
}

probe_start() { # NAME SCRIPT KEYS [ARGS...]
	local name="$1" script="$2" keys="$3" mode
	shift 3
	[ -r "$script" ] || { say "error no probe $script"; return 1; }
	# A probe that keeps its rows in @rows prints them once at exit (map mode): its perf buffer carries only the
	# progress counter. One that prints rows as they come (stream) gets a perf buffer for the whole run, strings
	# cut to 16 bytes (its longest is "zone_mgmt_send"), and is drained before it is stopped.
	local -a tune=()
	if grep -q '@rows\[' "$script"; then
		mode=map
		tune+=(BPFTRACE_PERF_RB_PAGES=64)
	else
		mode=stream
		tune+=("$(bpftrace_env strlen)=16" BPFTRACE_PERF_RB_PAGES="$PROBE_RB_PAGES")
	fi
	[ "$keys" -gt 0 ] && tune+=("$(bpftrace_env map_keys)=$keys")
	PROBE_MODE[$name]=$mode
	info "probe_${name}_mode" "$mode"
	info "probe_${name}_script" "$(script_name "$script")"
	say "stage probe $name starting bpftrace $(basename "$script") (compiling under emulation takes a while)"
	# stdout, not -o: bpftrace line-buffers stdout, so the BEGIN header shows when the probes are attached (with
	# -o it sits in a full buffer). The files are on the guest's tmpfs, not on 9p. nice 19: bpftrace's user space
	# (formatting streamed rows, printing a map at the end) yields the CPUs to the workload.
	rm -f "$TMP/$name.out" "$TMP/$name.err"
	env "${tune[@]}" nice -n 19 bpftrace "$script" "$@" > "$TMP/$name.out" 2> "$TMP/$name.err" &
	PROBE_PID[$name]=$!
	probe_wait_attached "$name"
}

probe_wait_attached() { # NAME: until BEGIN printed the version line, bpftrace exits or PROBE_ATTACH_TIMEOUT
	local name="$1" t0=$SECONDS pid="${PROBE_PID[$1]}"
	until has_line "$TMP/$name.out" "# ztbp $name v1"; do
		if ! kill -0 "$pid" 2>/dev/null; then
			wait "$pid" 2>/dev/null
			unset "PROBE_PID[$name]"
			say "error bpftrace $name exited: $(tr '\n' ' ' < "$TMP/$name.err")"
			return 1
		fi
		if [ $((SECONDS - t0)) -ge "$PROBE_ATTACH_TIMEOUT" ]; then
			say "error bpftrace $name did not attach within $PROBE_ATTACH_TIMEOUT s"
			probe_signal_until_exit "$name"
			return 1
		fi
		nap 0.2
	done
	nap 1
	info "probe_${name}_attach_s" "$((SECONDS - t0))"
	say "stage probe $name attached after $((SECONDS - t0)) s"
}

# ---- while it runs ----------------------------------------------------------------------------------------

probe_counter() { # NAME COUNTER: the last "@COUNTER: N" the probe printed, or empty
	sed -n "s/^@$2: \([0-9]*\)\$/\1/p" "$TMP/$1.out" 2>/dev/null | tail -n 1
}

probe_traced() { # NAME: what it has seen so far (its periodic @completed in map mode, rows written when streaming)
	if [ "${PROBE_MODE[$1]}" = map ]; then
		local n
		n="$(probe_counter "$1" completed)"
		echo "${n:-0}"
	else
		grep -c '^[0-9]' "$TMP/$1.out" 2>/dev/null
	fi
}

probe_drain() { # NAME: a streaming probe's user space lags behind a busy guest; wait until its output stops growing
	local name="$1" size=-1 now still=0 t0=$SECONDS
	while [ "$still" -lt "$PROBE_DRAIN_STILL" ] && [ $((SECONDS - t0)) -lt "$PROBE_DRAIN_TIMEOUT" ]; do
		now="$(stat -c %s "$TMP/$name.out")"
		if [ "$now" = "$size" ]; then
			still=$((still + 1))
		else
			still=0
			size="$now"
		fi
		if [ $(((SECONDS - t0) % 10)) -eq 0 ] && [ "$still" -eq 0 ]; then
			say "stage probe $name draining its buffer: $(wc -l < "$TMP/$name.out") lines written"
		fi
		nap 1
	done
	info "probe_${name}_drain_s" "$((SECONDS - t0))"
}

# ---- stop ----------------------------------------------------------------------------------------------------

cpu_ticks() { # PID: CPU time used so far (user + system clock ticks), empty once it has exited (builtins: it is
	# polled each second while a probe stops)
	local stat
	read -r stat 2> /dev/null < "${SYS_PROC:-/proc}/$1/stat" || return 0
	# shellcheck disable=SC2086  # after the command name: state ppid ... utime (12th) stime (13th)
	set -- ${stat##*) }
	echo $(( ${12} + ${13} ))
}

recursion_misses() { # PID: runs of its BPF programs the kernel skipped (fdinfo; Linux >= 5.12, else 0). Builtins
	# only: bpftrace holds a descriptor for each program, map and perf event, and a sed a descriptor took 5-10 s of
	# each probe's stop under TCG
	local f line v n=0
	for f in "${SYS_PROC:-/proc}/$1"/fdinfo/*; do
		[ -f "$f" ] || continue
		while read -r line; do
			[[ "$line" == recursion_misses:* ]] || continue
			v="${line#recursion_misses:}"
			v="${v//[[:space:]]/}"
			[[ "$v" =~ ^[0-9]+$ ]] && n=$((n + v))
		done 2> /dev/null < "$f"
	done
	echo "$n"
}

probe_threads() { # PID: each thread's id, state, kernel wait channel and CPU ticks (why an exit takes long)
	local t stat
	for t in /proc/"$1"/task/*; do
		stat="$(awk '{print $3, $14 + $15}' "$t/stat" 2>/dev/null)"  # state, then ticks as cpu_ticks counts them
		printf '%s:%s:%s:%s ' "${t##*/}" "${stat% *}" "$(cat "$t/wchan" 2>/dev/null)" "${stat#* }"
	done
}

probe_signal_until_exit() { # NAME: the STOP RULE
	local name="$1" pid="${PROBE_PID[$1]}" t0=$SECONDS idle=0 polling=0 ticks now tell=$PROBE_EXIT_TELL
	ticks="$(cpu_ticks "$pid")"
	kill -INT "$pid" 2>/dev/null
	while kill -0 "$pid" 2>/dev/null; do
		nap 1
		if [ $((SECONDS - t0)) -ge "$tell" ]; then  # a streaming probe exits in seconds: where a slow one is, every
			# 2 minutes
			say "stage probe $name: still exiting after $((SECONDS - t0)) s, its threads (id:state:wchan:ticks):" \
				"$(probe_threads "$pid")"
			tell=$((tell + 120))
		fi
		now="$(cpu_ticks "$pid")"
		if [ "$now" = "$ticks" ]; then idle=$((idle + 1)); else idle=0; fi
		ticks="$now"
		case "$(cat "/proc/$pid/wchan" 2>/dev/null)" in
			do_epoll_wait|ep_poll) polling=$((polling + 1)) ;;
			*) polling=0 ;;
		esac
		if [ "$idle" -ge "$PROBE_STOP_IDLE" ] || [ $((SECONDS - t0)) -ge "$PROBE_STOP_TIMEOUT" ]; then break; fi
		if { [ "$idle" -gt 0 ] && [ $((idle % PROBE_RESIGNAL_IDLE)) -eq 0 ]; } || [ "$polling" -ge "$PROBE_RESIGNAL_IDLE" ]; then
			kill -INT "$pid" 2>/dev/null
			polling=0
		fi
	done
	if kill -0 "$pid" 2>/dev/null; then
		say "stage probe $name: bpftrace did not finish after SIGINT in $((SECONDS - t0)) s (wchan" \
			"$(cat "/proc/$pid/wchan" 2>/dev/null)): terminating it (rows not yet written are lost)"
		kill -TERM "$pid" 2>/dev/null
		nap "$PROBE_KILL_WAIT"
		kill -KILL "$pid" 2>/dev/null
	fi
	wait "$pid" 2>/dev/null
	unset "PROBE_PID[$name]"
	say "stage probe $name: bpftrace exited after $((SECONDS - t0)) s"
}

probe_extract() { # NAME: $TMP/NAME.out -> $TMP/NAME.csv (the two header lines, then the rows)
	local name="$1" to_csv="$PROBE_LIB_SRC/probes/nvme_zone_csv.sh"
	if [ "${PROBE_MODE[$name]}" = map ]; then
		sed -n "/^# ztbp $name v1\$/{p;n;p;q}" "$TMP/$name.out" > "$TMP/$name.csv"
		if ! grep -q '^@unstamped: ' "$TMP/$name.out"; then
			# bpftrace prints its maps, @unstamped last, only when it exits normally.
			say "error bpftrace did not print its map of rows (killed or crashed before its exit?): they are lost"
			STATUS="failed"
		fi
		# completion order: the first field of each converted row is the completion time
		# the rows mapdump.py took ($TMP/NAME.dump) and those bpftrace printed at exit, in the same format
		if ! bash "$to_csv" "$TMP/$name.out" "$TMP/$name.dump" >> "$TMP/$name.csv"; then
			say "error nvme_zone.awk could not convert every row (see console.log); they count as lost"
			STATUS="failed"
		fi
	else
		# From the version line on, without bpftrace's own messages, counters and blank lines.
		sed -n "/^# ztbp $name v1\$/,\$p" "$TMP/$name.out" |
			grep -v -E '^(Lost [0-9]+ events|@[a-z_]+: [0-9]+)?$' > "$TMP/$name.csv"
	fi
}

probe_account() { # NAME MISSES: the LOSS RULE; sets PROBE_ROWS and PROBE_LOST
	local name="$1" misses="$2" perf_lost setups completed counted unsure dropped unprinted unmatched
	perf_lost="$(grep -h -o -E '^Lost [0-9]+ events' "$TMP/$name.out" "$TMP/$name.err" | awk '{s += $2} END {print s + 0}')"
	completed="$(probe_counter "$name" completed)"
	setups="$(probe_counter "$name" setups)"
	counted="$(probe_counter "$name" lost)"
	unsure="$(probe_counter "$name" unsure)"
	dropped=$((${counted:-0} + ${unsure:-0}))
	PROBE_ROWS=$(($(wc -l < "$TMP/$name.csv") - 2))
	[ "$PROBE_ROWS" -lt 0 ] && PROBE_ROWS=0
	# rows handed over while it ran (the loop's rounds, out of its map) are rows of the session too
	PROBE_ROWS=$((PROBE_ROWS + ${PROBE_TAKEN[$name]:-0}))
	if [ -z "$completed" ]; then
		say "error bpftrace $name did not print its counters: its lost-event count is unknown"
		STATUS="failed"
	fi
	if [ -n "$setups" ]; then
		unmatched=$((setups - ${completed:-0}))
	else
		unmatched=$misses
		setups=$((${completed:-0} + misses))
	fi
	unprinted=$((${completed:-0} - PROBE_ROWS))
	[ "$unprinted" -lt "$perf_lost" ] && unprinted=$perf_lost
	PROBE_LOST=$((unprinted + unmatched + dropped))
	info "probe_${name}_setups" "$setups"
	info "probe_${name}_completed" "${completed:-0}"
	info "probe_${name}_rows" "$PROBE_ROWS"
	info "probe_${name}_perf_lost" "$perf_lost"
	info "probe_${name}_recursion_misses" "$misses"
	info "probe_${name}_dropped" "$dropped"
	info "probe_${name}_unsure" "${unsure:-0}"
	info "lost_events_$name" "$PROBE_LOST"
	say "stage probe $name stopped: $PROBE_ROWS rows, $PROBE_LOST lost ($perf_lost reported by bpftrace," \
		"$unmatched unmatched or skipped, $dropped counted by the probe$([ "${unsure:-0}" -gt 0 ] &&
		echo ", $unsure of them maybe not requests"))"
}

probe_fast_dump() { # NAME: a map probe's rows taken out of the running bpftrace in batches (mapdump.py); what
	# completes afterwards stays in the map and bpftrace prints it at exit. Without python3, or when it fails,
	# bpftrace prints the rows (slowly) itself. ZTBP_MAPDUMP=0 leaves it all to bpftrace (to compare).
	local name="$1" t0=$SECONDS rc=0
	: > "$TMP/$name.dump"
	[ "${ZTBP_MAPDUMP:-1}" = 1 ] && command -v python3 >/dev/null 2>&1 || return 0
	python3 "$PROBE_LIB_SRC/vm/guest/mapdump.py" "${PROBE_PID[$name]}" > "$TMP/$name.dump" \
		2> "$TMP/$name.dump.err" || rc=$?
	info "probe_${name}_dump_s" "$((SECONDS - t0))"
	say "stage probe $name: $(wc -l < "$TMP/$name.dump") rows read from its map in $((SECONDS - t0)) s" \
		"$([ "$rc" -eq 0 ] || echo "(mapdump.py exit $rc: $(tr '\n' ' ' < "$TMP/$name.dump.err"); bpftrace prints the rest)")"
}

probe_stop() { # NAME: drain, stop, extract, account
	local name="$1" misses t0=$SECONDS
	[ -n "${PROBE_PID[$name]:-}" ] || return 0
	[ "${PROBE_MODE[$name]}" = stream ] && probe_drain "$name"
	say "stage probe $name stopping bpftrace"
	misses="$(recursion_misses "${PROBE_PID[$name]}")"
	[ "${PROBE_MODE[$name]}" = map ] && probe_fast_dump "$name"
	probe_signal_until_exit "$name"
	probe_extract "$name"
	info "probe_${name}_stop_s" "$((SECONDS - t0))"
	probe_account "$name" "$misses"
}

probe_stop_all() { # stop every probe still running (on exit: a capture that failed keeps what was traced)
	local name
	for name in "${!PROBE_PID[@]}"; do
		probe_stop "$name"
	done
}

# ---- saving a capture on a file system -----------------------------------------------------------------------
# app-capture.sh and layers-capture.sh end alike: their EXIT trap is capture_on_exit, and their save_outputs
# calls save_probe_files for the probes' rows, copies its own files, and ends with save_status.

save_probe_files() { # NAME...: each probe's $TMP/NAME.csv to OUT/raw, its $TMP/NAME.err to OUT/.capture
	local name
	mkdir -p "$OUT/raw" "$OUT/.capture"
	for name in "$@"; do
		[ -f "$TMP/$name.csv" ] && cp "$TMP/$name.csv" "$OUT/raw/$name.csv"
		cp "$TMP/$name.err" "$OUT/.capture/$name.err" 2>/dev/null
	done
	return 0
}

save_status() { # the capture's STATUS into guest.env, guest.env to OUT/.capture, everything to the disk
	info status "$STATUS"
	cp "$TMP/guest.env" "$OUT/.capture/guest.env"
	sync
}

capture_on_exit() { # EXIT trap: stop the probes still running (the capture failed, what they traced is kept),
	# unmount MNT, save_outputs, and exit with the script's status
	local rc=$?
	if [ "${#PROBE_PID[@]}" -gt 0 ]; then
		STATUS="failed"
		probe_stop_all
	fi
	mountpoint -q "$MNT" && umount "$MNT"
	[ -n "$TMP" ] && save_outputs
	exit "$rc"
}
