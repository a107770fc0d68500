#!/usr/bin/env bash
# Install the Debian packages the workbench needs on the host: QEMU and mmdebstrap for the VM path,
# clang for the ioctl helper's fuzz target, Chromium for the browser test of the reports. Idempotent:
# installs only what is missing. Needs root (or prints the apt-get line to run).
#
# Another apt or dpkg may hold the package manager's locks (a fresh Debian machine often runs
# unattended-upgrades at first boot): the script then says which process holds which lock and waits for it,
# up to APT_LOCK_TIMEOUT seconds in all, instead of failing at once with apt's exit status 100.
set -euo pipefail

PACKAGES=(
	qemu-system-x86      # the VM
	qemu-utils           # qemu-img
	mmdebstrap           # guest root file system from Debian packages
	e2fsprogs            # mke2fs -d: ext4 image without mounting
	fakeroot             # run mmdebstrap hooks without privileges where needed
	zstd                 # image cache compression
	clang                # ztbp-ctl fuzz target (libFuzzer) and sanitizer builds
	libclang-rt-14-dev   # libFuzzer / ASan / UBSan runtimes for clang 14
	linux-libc-dev       # uapi headers for ztbp-ctl (linux/nvme_ioctl.h, linux/blkzoned.h)
	make                 # builds ztbp-ctl (just build) and its test, ASan and fuzz variants
	gcc                  # ztbp-ctl's default compiler and its ASan/UBSan test build
	libc6-dev            # libc headers for ztbp-ctl
	kmod                 # modinfo: ../shared/nvmevirt/build.sh checks the vermagic of the NVMeVirt module it builds
	fio                  # tests/test_workload.py runs the workloads' job files on a null engine (seeds)
	chromium             # headless browser test of the HTML reports (tests/test_report_browser.py)
	chromium-driver      # chromedriver, driven by selenium in that test
)
# The locks apt-get update and apt-get install take (ZTBP_APT_LOCKS: a space-separated list, for tests).
read -r -a APT_LOCKS <<< "${ZTBP_APT_LOCKS:-/var/lib/dpkg/lock-frontend /var/lib/dpkg/lock /var/lib/apt/lists/lock /var/cache/apt/archives/lock}"
APT_LOCK_TIMEOUT="${ZTBP_APT_LOCK_TIMEOUT:-600}"   # seconds to wait for them in all
LOCK_POLL=2                                         # seconds between looks
LOCK_REPORT_EVERY=30                                # seconds between "still waiting" lines
APT_STARTED=$SECONDS

usage() {
	cat <<EOF
Usage: $0

Install the host packages the workbench needs (apt-get, as root): ${PACKAGES[*]}
Waits up to ${APT_LOCK_TIMEOUT} s (ZTBP_APT_LOCK_TIMEOUT) for another apt or dpkg to release its locks.
EOF
}

missing_packages() {
	local p
	for p in "${PACKAGES[@]}"; do
		dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || echo "$p"
	done
}

lock_holders() {
	# "FILE held by COMMAND (pid N)" for each lock file some process holds a lock on (/proc/locks, by inode;
	# apt and dpkg take fcntl locks, which is what /proc/locks lists).
	local f inode pid
	for f in "${APT_LOCKS[@]}"; do
		[ -e "$f" ] || continue
		inode="$(stat -c %i "$f")"
		for pid in $(awk -v inode="$inode" '$2 != "->" { n = split($6, d, ":"); if (d[n] == inode) print $5 }' /proc/locks | sort -u); do
			if [ "$pid" = -1 ]; then
				echo "$f held by an open file description lock (its process is not listed)"
			else
				echo "$f held by $(cat "/proc/$pid/comm" 2>/dev/null || echo "a process that just ended") (pid $pid)"
			fi
		done
	done
}

wait_for_apt_locks() {
	# Until no process holds an apt or dpkg lock, or APT_LOCK_TIMEOUT s since the script started.
	local holders waited=0 reported=-$LOCK_REPORT_EVERY
	while holders="$(lock_holders)"; [ -n "$holders" ]; do
		if [ $((SECONDS - APT_STARTED)) -ge "$APT_LOCK_TIMEOUT" ]; then
			echo "deps: error: the package manager is still busy after ${APT_LOCK_TIMEOUT} s: $(echo "$holders" | paste -sd ';' -)." >&2
			echo "deps: let it finish (a fresh Debian machine runs unattended-upgrades at first boot) and run 'just deps' again," \
				"or wait longer with ZTBP_APT_LOCK_TIMEOUT=SECONDS" >&2
			return 1
		fi
		if [ $((waited - reported)) -ge "$LOCK_REPORT_EVERY" ]; then
			echo "deps: waiting for another package manager to finish: $(echo "$holders" | paste -sd ';' -)" \
				"(up to $((APT_LOCK_TIMEOUT - (SECONDS - APT_STARTED))) s more)" >&2
			reported=$waited
		fi
		sleep "$LOCK_POLL"
		waited=$((waited + LOCK_POLL))
	done
}

apt_get() {
	# apt-get ARGS once the locks are free; if another apt took them in between (exit 100 with a holder), again.
	local rc left
	while :; do
		wait_for_apt_locks || return 1
		left=$((APT_LOCK_TIMEOUT - (SECONDS - APT_STARTED)))
		rc=0
		apt-get -o "DPkg::Lock::Timeout=$((left > 0 ? left : 0))" "$@" || rc=$?
		if [ "$rc" -eq 100 ] && [ -n "$(lock_holders)" ] && [ $((SECONDS - APT_STARTED)) -lt "$APT_LOCK_TIMEOUT" ]; then
			continue
		fi
		return "$rc"
	done
}

main() {
	case "${1:-}" in -h|--help) usage; return 0 ;; esac
	local missing
	mapfile -t missing < <(missing_packages)
	if [ "${#missing[@]}" -eq 0 ]; then
		echo "deps: all host packages present"
		return 0
	fi
	if [ "$(id -u)" -ne 0 ]; then
		echo "deps: missing packages: ${missing[*]}" >&2
		echo "deps: run as root: apt-get update && apt-get install -y ${missing[*]}" >&2
		return 1
	fi
	echo "deps: installing ${missing[*]}"
	export DEBIAN_FRONTEND=noninteractive
	apt_get update -qq
	apt_get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
	echo "deps: installed ${missing[*]}"
}

# Sourced by tests/test_install_deps.py for its functions; run directly to install.
if [ "${BASH_SOURCE[0]}" = "$0" ]; then
	main "$@"
fi
