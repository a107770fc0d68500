#!/usr/bin/env bash
# Install the Debian packages the workbench needs on the host: QEMU and mmdebstrap for the VM path,
# clang for the ioctl helper's fuzz target, Chromium for the browser test of the reports. Idempotent:
# installs only what is missing. Needs root (or prints the apt-get line to run).
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
	chromium             # headless browser test of the HTML reports (tests/test_report_browser.py)
	chromium-driver      # chromedriver, driven by selenium in that test
)

missing_packages() {
	local p
	for p in "${PACKAGES[@]}"; do
		dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || echo "$p"
	done
}

main() {
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
	apt-get update -qq
	apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
	echo "deps: installed ${missing[*]}"
}

main "$@"
