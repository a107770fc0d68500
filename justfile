# ZTBP workbench — `just --list` shows every recipe with its comment.
set shell := ["bash", "-euo", "pipefail", "-c"]
set positional-arguments := false

VENV := justfile_directory() / ".venv"
# `just run`'s reads a round (a first look; the paper's 1,000,000: `just run READS=1000000`) and rounds
RUN_READS := "200000"
RUN_ROUNDS := "2"
PY := VENV / "bin" / "python"
ZTBP := VENV / "bin" / "ztbp"

# list the recipes
default:
    @just --list --unsorted

# create or update .venv (idempotent) and install the package editable with its dev tools
[group('setup')]
setup:
    #!/usr/bin/env bash
    set -euo pipefail
    stamp="{{VENV}}/.ztbp-setup-stamp"
    # the stamp names what was installed and how (bytecode: a venv set up before it is compiled once)
    want="$({ cat pyproject.toml; echo bytecode; } | sha256sum | cut -c1-16)"
    if [ ! -x "{{PY}}" ]; then python3 -m venv "{{VENV}}"; fi
    if [ "$(cat "$stamp" 2>/dev/null)" != "$want" ] || ! "{{PY}}" -c 'import ztbp' 2>/dev/null; then
        # uv (from PyPI, into the venv) installs the same set in seconds where pip takes most of a minute;
        # pip does it when uv cannot be had. Both write the byte code of what they install (uv only when asked:
        # --compile-bytecode), so no command compiles numpy, polars or numba from source at start-up — which took
        # 1.3 s of each `ztbp` command where byte code cannot be written (PYTHONDONTWRITEBYTECODE, sudo)
        if ! { "{{PY}}" -m pip install -q uv \
               && "{{VENV}}/bin/uv" pip install -q --compile-bytecode --python "{{PY}}" -e '.[dev]'; }; then
            echo "setup: uv could not install the environment; pip does it (slower)"
            "{{PY}}" -m pip install -q --upgrade pip
            "{{PY}}" -m pip install -q -e '.[dev]'
        fi
        # what an earlier setup installed without byte code (the installers compile only what they install);
        # a vendored file a Python 3 cannot compile is skipped, as both installers skip it
        "{{PY}}" -m compileall -qq -j 0 "$("{{PY}}" -c 'import sysconfig; print(sysconfig.get_path("purelib"))')" || true
        echo "$want" > "$stamp"
        bash tools/hand-over.sh "{{VENV}}" pipelines/ztbp.egg-info build  # under sudo: still the user's
    fi
    # the package itself is installed editable (its source, not a copy): its byte code, brought up to date
    # (a module changed since is compiled again; an unchanged one is only looked at)
    "{{PY}}" -m compileall -q -j 0 pipelines/ztbp
    bash tools/hand-over.sh pipelines/ztbp
    echo "setup: .venv ready ($("{{PY}}" --version))"

# install the system packages the VM path needs (qemu, mmdebstrap, ...; apt, as root; waits up to 10 min for another apt to finish)
[group('setup')]
deps:
    bash vm/install-deps.sh

# run the whole test suite (unit, property, real VM capture; the 25 slowest listed at the end, then the wall time of each phase: setup, deps, images, lint, ctl, tests) — the README's test line runs this
[group('test')]
test:
    #!/usr/bin/env bash
    set -euo pipefail
    log="$(mktemp)"
    times=()
    phase() {  # NAME COMMAND...: run it and keep its wall time, whether it passed or not
        local name="$1" t0=$SECONDS rc=0
        shift
        "$@" || rc=$?
        times+=("$(printf '%-8s %5d s%s' "$name" $((SECONDS - t0)) "$([ $rc -eq 0 ] || echo "  (exit $rc)")")")
        return $rc
    }
    report() {  # the phases' wall times, then pytest's closing line again, so it stays the last line
        local rc=$?
        echo "test: wall time of each phase"
        printf '  %s\n' "${times[@]}"
        [ ! -s "$log" ] || tail -n 1 "$log"
        rm -f "$log"
        exit $rc
    }
    images() {  # both suites' guest images at once, each line of theirs named by its suite (both built from nothing on a 2-core machine: 105-120 s at once, against 170-184 s one after the other)
        local s p pids=() rc=0
        for s in bookworm trixie; do
            (set -o pipefail; bash vm/image.sh --suite "$s" 2>&1 >/dev/null | sed -u "s/^/[$s] /" >&2) &
            pids+=("$!")
        done
        for p in "${pids[@]}"; do wait "$p" || rc=1; done
        return $rc
    }
    trap report EXIT
    phase setup {{quote(just_executable())}} setup
    phase deps {{quote(just_executable())}} deps
    phase images images
    phase lint {{quote(just_executable())}} lint
    # ztbp-ctl before any guest boots: a guest caches the checkout (vm/guest/boot.sh), a file made later may stay unseen
    phase ctl {{quote(just_executable())}} build
    # three workers: two run the VM tests as two chains, each in order with its shared guests (tests/conftest.py VM_CHAINS), the third the unit tests and notebooks beside them; all but vm-a at nice 5 (tests/conftest.py UNIT_NICE)
    phase tests bash -c 'set -o pipefail; "$0" -m pytest -q -n 3 --durations=25 tests notebooks --nbval-lax --nbval-current-env --nbval-sanitize-with notebooks/nbval-sanitize.cfg | tee "$1"' {{PY}} "$log"

# run only the fast tests (no VM)
[group('test')]
test-fast: setup
    {{PY}} -m pytest -q -m 'not vm'

# the wheel installed into a fresh venv outside the checkout (deps from a wheelhouse packed from .venv, nothing downloaded): doctor, capture-host --help and the report with NOTEBOOKS (default every one, e.g. NOTEBOOKS=1 for the overview); `just test` only builds the wheel and checks what it carries
[group('test')]
test-wheel NOTEBOOKS="all": setup
    ZTBP_TEST_WHEEL=1 ZTBP_WHEEL_REPORT={{quote(NOTEBOOKS)}} {{PY}} -m pytest -q -s -p no:cacheprovider tests/test_wheel.py

# the host path in the guest as on a user's machine, at full size: on a real-drive-shaped zoned namespace (64 MiB zones holding 48 MiB, 14 open/active, 1,024 zones) the wheel installed with pip, then doctor, capture-host, cluster, a 2-round loop --host and a watch session; on NVMeVirt (which acts on SET) the same with the device's readback, a three-phase watch session and one with a budget of one apply (tests/test_host_path_vm.py and tests/test_host_path_nvmevirt_vm.py; `just test` runs a smaller QEMU part); INSTALL=wheel installs the wheel alone over this venv
[group('test')]
test-host-path INSTALL="wheelhouse": setup
    ZTBP_TEST_HOST_PATH=1 ZTBP_TEST_HOST_INSTALL={{quote(INSTALL)}} {{PY}} -m pytest -q -p no:cacheprovider -rs -s tests/test_host_path_vm.py tests/test_host_path_nvmevirt_vm.py

# ruff over the package and tests
[group('test')]
lint: setup
    {{VENV}}/bin/ruff check pipelines tests

# every benchmark: CLI start-up, the analysis on N synthetic events, hot-zone clustering on up to 16,384 zones, then the NVMe and layer probe overheads in the VM
[group('test')]
bench N="10000000": bench-cli (bench-analysis N) bench-cluster bench-probe bench-layers

# CLI start-up: `ztbp --version` / `--help` wall time (target ≤ 0.5 s) and the imports behind building the parser
[group('test')]
bench-cli ROUNDS="5": setup
    PATH="{{VENV}}/bin:$PATH" {{PY}} pipelines/benchmarks/bench_cli.py --rounds {{quote(ROUNDS)}}

# analysis speed and memory: ingest rate, time of every stage and peak RSS on N synthetic events (default 10 M)
[group('test')]
bench-analysis N="10000000": setup
    {{PY}} pipelines/benchmarks/bench.py --events {{quote(N)}}

# `ztbp ingest` of READS synthetic commands against polars reading the same CSV, each a whole process, ROUNDS pairs side by side (target: ingest ≤ 1.5× the bare read), and where an ingest's time goes
[group('test')]
bench-ingest READS="3000000" ROUNDS="5": setup
    {{PY}} pipelines/benchmarks/bench_ingest.py --reads {{quote(READS)}} --rounds {{quote(ROUNDS)}}

# hot-zone clustering time on ZONES devices of 32 MiB zones read all over (READS reads each, comma-separated; above 20 M counted on the fly as `ztbp stream` counts; target: 16,384 zones in ≤ 10 s, e.g. READS=1000000,100000000) and the cache policies' speed, the project's LRU and Belady against libCacheSim's
[group('test')]
bench-cluster ZONES="1024,4096,16384" READS="1000000": setup
    {{PY}} pipelines/benchmarks/bench_cluster.py --zones {{quote(ZONES)}} --reads {{quote(READS)}}

# how many reads the device's cache needs to turn over after the configuration switches (paper80, paper60 and uniform reads through the fork's cache, zone-LRU and LRU of ENTRIES entries): the A/B block length each asks for
[group('test')]
bench-turnover READS="200000" ENTRIES="16384": setup
    {{PY}} pipelines/benchmarks/bench_turnover.py --reads {{quote(READS)}} --entries {{quote(ENTRIES)}}

# ztbp watch's memory over a long session: N synthetic commands (hot set A, B, Zipf, over and over; two CPUs' rows printed in turn, out of time order) through the session's pipeline with its reorder buffer, RSS every INTERVAL commands (flat), commands/s of the whole and of the pipeline alone
[group('test')]
bench-watch N="10000000" INTERVAL="1000000": setup
    {{PY}} pipelines/benchmarks/bench_watch.py --commands {{quote(N)}} --interval {{quote(INTERVAL)}}

# at scale (docs/scale.md): streaming ingest, streaming analyses, SHARDS vs exact, ztbp batch on 2 workers vs sequential
[group('test')]
bench-scale CSV_ROWS="200000000" EVENTS="1000000000" RUNS="50": setup
    {{PY}} pipelines/benchmarks/bench_scale.py --csv-rows {{quote(CSV_ROWS)}} --events {{quote(EVENTS)}} --runs {{quote(RUNS)}}

# everything CI runs
[group('test')]
ci: test

# write a synthetic run: just synth runs/synth-paper80 paper80 1000000
[group('analyse')]
synth RUN="runs/synth-paper80" PATTERN="paper80" READS="1000000" SEED="1": setup
    {{ZTBP}} synth {{quote(RUN)}} --pattern {{quote(PATTERN)}} --reads {{quote(READS)}} --seed {{quote(SEED)}}

# every analysis of one run, as JSON files in RUN/derived/ and a summary on the terminal
[group('analyse')]
analyse RUN: setup
    {{ZTBP}} ingest {{quote(RUN)}}
    {{ZTBP}} zones {{quote(RUN)}} --top 8
    {{ZTBP}} chains {{quote(RUN)}}
    {{ZTBP}} frag {{quote(RUN)}} | head -3
    {{ZTBP}} cluster {{quote(RUN)}}
    {{ZTBP}} cachesim {{quote(RUN)}}
    {{ZTBP}} config {{quote(RUN)}} -o {{quote(RUN / "derived" / "cache-config.json")}}

# build the ioctl helper tools/ztbp-ctl/build/ztbp-ctl (C11, warnings as errors)
[group('device')]
build:
    make -s -C tools/ztbp-ctl
    bash tools/hand-over.sh tools/ztbp-ctl/build

# build the wheel into DIST with the standard build (pip wheel): the package with probes, notebooks, guest scripts and ztbp-ctl's source in ztbp/_share/; install it anywhere with `pip install DIST/ztbp-*.whl`, then `ztbp doctor`
[group('setup')]
wheel DIST="dist": setup
    {{PY}} -m pip wheel -q --no-deps -w {{quote(DIST)}} .
    ls -l {{quote(DIST)}}/ztbp-*.whl

# fuzz ztbp-ctl's config parser and command line with libFuzzer (clang, ASan+UBSan) for SECONDS, one process
[group('device')]
fuzz SECONDS="600":
    make -s -C tools/ztbp-ctl fuzz-run FUZZ_SECONDS={{ if SECONDS =~ '^[0-9]+$' { quote(SECONDS) } else { error("SECONDS must be a whole number of seconds, e.g. 600") } }}

# write RUN's cache config and send its five best zones to DEV with ztbp-ctl set (dry run when DEV is empty); a config that says "recommend": false is refused (exit code 16) unless FORCE is non-empty
[group('device')]
apply RUN="runs/synth-paper80" DEV="" FORCE="": setup build
    {{ZTBP}} apply {{quote(RUN)}}{{ if DEV == "" { "" } else { " --device " + quote(DEV) } }}{{ if FORCE == "" { "" } else { " --force" } }}

# run every notebook on RUN (papermill) and write the offline HTML report reports/<run-id>/index.html; ARGS: -f params.yaml, -p NAME VALUE, -o DIR, --only 1,6
[group('report')]
[positional-arguments]
report RUN="tests/data/runs/sample-paper80" *ARGS: setup
    {{ZTBP}} report {{quote(RUN)}} "${@:2}"

# write RUN as a Perfetto trace, by default next to its report: reports/<run-id>/<run-id>.pftrace (open it at ui.perfetto.dev); ARGS: --window 1s:1.5s, --zones 1,7, --check
[group('report')]
[positional-arguments]
perfetto RUN="tests/data/runs/sample-paper80" OUT="" *ARGS: setup
    {{ZTBP}} perfetto {{quote(RUN)}} -o {{ if OUT == "" { quote("reports" / file_name(RUN) / file_name(RUN) + ".pftrace") } else { quote(OUT) } }} "${@:3}"

# the HTML report of every run in runs/
[group('report')]
[positional-arguments]
report-all *ARGS: setup
    {{ZTBP}} report --all "$@"

# maintainers: rerun notebooks/ on their defaults (the committed samples) and store the outputs nbval checks in them; NOTEBOOKS: comma-separated numbers or names (default every one), e.g. `just update-notebooks 1,6`; review the diff after
[group('report')]
update-notebooks NOTEBOOKS="": setup
    {{PY}} tools/update-notebook-outputs.py {{quote(NOTEBOOKS)}}

# open JupyterLab on notebooks/ (package importable; every parameters cell preselects the sample run)
[group('report')]
notebook: setup
    {{VENV}}/bin/jupyter lab $([ "$(id -u)" -eq 0 ] && echo --allow-root) --ServerApp.root_dir={{quote(justfile_directory())}} notebooks/1-overview.ipynb

# build (or reuse) the cached guest image of SUITE (bookworm: Debian 12, Linux 6.1; trixie: Debian 13, Linux 6.12) by mmdebstrap, kernel + initrd + ext4 (~2 min once)
[group('capture')]
image SUITE="bookworm": deps
    bash vm/image.sh --suite {{quote(SUITE)}}

# trace WORKLOAD (paper80, paper60, uniform, zipf, seqwrite, mixed) in the QEMU VM into runs/<UTC time>-<WORKLOAD>/; ARGS: e.g. --zones 128 --jobs 8
[group('capture')]
[positional-arguments]
capture WORKLOAD="paper80" READS="1000000" *ARGS: setup deps
    {{ZTBP}} capture {{quote(WORKLOAD)}} --reads {{quote(READS)}} "${@:3}"

# trace WORKLOAD on a real zoned drive DEV of this machine (root; refuses writes without --destructive in ARGS)
[group('capture')]
[positional-arguments]
capture-host DEV WORKLOAD="paper80" *ARGS: setup
    {{ZTBP}} capture-host {{quote(DEV)}} {{quote(WORKLOAD)}} "${@:3}"

# closed loop in one VM boot: capture WORKLOAD, analyse, send the hot zones, capture again (ROUNDS rounds of READS reads; CACHE_MIB: the model's cache, small enough for READS to evict); ARGS: e.g. --backend nvmevirt --nvmevirt-ko nvmev.ko, --fio-file FILE, --host DEV
[group('capture')]
[positional-arguments]
loop WORKLOAD="paper80" ROUNDS="3" READS="20000" CACHE_MIB="16" *ARGS: setup deps build
    {{ZTBP}} loop {{quote(WORKLOAD)}} --rounds {{quote(ROUNDS)}} --reads {{quote(READS)}} --cache-mib {{quote(CACHE_MIB)}} "${@:5}"

# what the paper's cache alone is worth (docs/metrics.md): `ztbp loop --ab` on paper80, paper60 and a random hot set for three NVMeVirt devices built for the guest kernel from ../shared/nvmevirt at --slow SLOW — the fork as it is, and the project's read model (vm/read-model) with zone-priority LRU and with plain LRU (the negative control), its charges x SCALE so its 4 KiB miss costs what the fork's does — PAIRS pairs of A/B blocks of BLOCK reads (300,000: what zone-priority LRU needs to turn over, `just bench-turnover`) after a round of READS, JOBS x QD outstanding; one loop directory per cell and block length in OUT (a finished one is kept), then `ztbp compare` of each
[group('capture')]
cache-worth OUT="runs/cache-worth" SLOW="4" SCALE="60" PAIRS="4" BLOCK="300000" READS="80000" JOBS="16" QD="4": setup deps image build
    #!/usr/bin/env bash
    set -euo pipefail
    for v in {{quote(OUT)}} {{quote(SLOW)}} {{quote(SCALE)}} {{quote(PAIRS)}} {{quote(BLOCK)}} {{quote(READS)}} {{quote(JOBS)}} {{quote(QD)}}; do
        case "$v" in [A-Z]*=*) echo "cache-worth: '$v': give the parameters by place (just cache-worth OUT SLOW SCALE PAIRS BLOCK READS JOBS QD), not NAME=VALUE; nothing was run" >&2; exit 2 ;; esac
    done
    [ -x ../shared/nvmevirt/build.sh ] || [ -f ../shared/nvmevirt/build.sh ] || { echo "cache-worth: ../shared/nvmevirt/build.sh is missing: NVMeVirt is built from it (vm/README.md)" >&2; exit 2; }
    rel="$(cat "$({{PY}} -c 'from ztbp.acquire.vm import image_dir; print(image_dir("bookworm"))')/kernel-release")"
    fork="$(bash ../shared/nvmevirt/build.sh "$rel" --slow {{quote(SLOW)}} | tail -n1)"
    model="$(bash ../shared/nvmevirt/build.sh "$rel" --slow {{quote(SLOW)}} --read-model vm/read-model/ztbp_read_model.c | tail -n1)"
    charges="$({{PY}} -c 'import sys; from ztbp.analysis.read_model import ReadModel; m = ReadModel().scaled(int(sys.argv[1])); print(f"hit_ns={m.hit_ns} miss_ns={m.miss_ns}")' {{quote(SCALE)}})"
    mkdir -p {{quote(OUT)}}
    for wl in "paper80" "paper60" "paper80 --hot-zones 3,9,14,22,27"; do
        name="$(echo "$wl" | sed -e 's/ --hot-zones /-zones/' -e 's/,/./g')"
        for dev in fork zone_lru lru; do
            case "$dev" in
                fork) args=(--nvmevirt-ko "$fork") ;;
                *) args=(--nvmevirt-ko "$model" --nvmevirt-params "policy=$dev $charges") ;;
            esac
            cell={{quote(OUT)}}/"$dev-$name-block"{{quote(BLOCK)}}
            if {{PY}} -c 'import json, sys; sys.exit(0 if json.load(open(sys.argv[1])).get("complete") else 1)' "$cell/loop.json" 2>/dev/null; then
                echo "cache-worth: $cell done, kept" >&2; continue
            fi
            rm -rf "$cell"
            # shellcheck disable=SC2086
            {{ZTBP}} loop $wl --backend nvmevirt "${args[@]}" --jobs {{quote(JOBS)}} --iodepth {{quote(QD)}} --reads {{quote(READS)}} --ab {{quote(PAIRS)}} --ab-reads {{quote(BLOCK)}} -o "$cell" --timeout 7200 > "$cell.log" 2>&1 || echo "cache-worth: $cell failed (see $cell.log)" >&2
            {{ZTBP}} compare "$cell" > "$cell.compare.txt" 2>&1 || true
            echo "cache-worth: $cell: $(grep -m1 -i 'hit ratio, device' "$cell.compare.txt" || tail -n1 "$cell.compare.txt")" >&2
        done
    done

# an interactive root shell in the guest (repository at /ztbp/src, zoned namespace /dev/nvme0n1); power off with: echo o > /proc/sysrq-trigger
[group('capture')]
vm-shell ZONES="64": deps build
    bash vm/vmtest.sh --interactive --zones {{quote(ZONES)}}

# probe overhead: fio IOPS with and without PROBE (in probes/) in one VM boot, ROUNDS alternated rounds each
[group('capture')]
bench-probe ROUNDS="5" READS="200000" PROBE="nvme_zone.bt": deps
    bash vm/bench-probe.sh --rounds {{quote(ROUNDS)}} --reads {{quote(READS)}} --probe {{quote(PROBE)}}

# main job, the whole loop on the default set-up, sized for a first look (2.5 min of loop here under TCG, the image built; measured with other guests running): capture paper80 in the VM (READS reads a round: 200,000 find the paper's five hot zones and take the same decisions as the paper's 1,000,000, which `just run READS=1000000` runs: 5 min of loop), analyse, decide, apply, capture again (ROUNDS rounds in one boot; QEMU's namespace refuses the send, so each configuration is scored out of sample on the next round; ARGS such as `--backend nvmevirt --nvmevirt-ko nvmev.ko` give a device that acts on it), then the HTML report (the loop's page, each round's pages) and where it is
[group('capture')]
[positional-arguments]
run READS=RUN_READS ROUNDS=RUN_ROUNDS *ARGS: setup deps image build
    #!/usr/bin/env bash
    set -euo pipefail
    # a parameter by its place (`just run 1000000 3`) or by its name (`just run READS=1000000`, `just run ROUNDS=3`)
    reads={{quote(RUN_READS)}} rounds={{quote(RUN_ROUNDS)}} named=" "
    for slot in READS:{{quote(READS)}} ROUNDS:{{quote(ROUNDS)}}; do
        value="${slot#*:}"
        case "$value" in
            READS=*) reads="${value#READS=}"; named+="READS " ;;
            ROUNDS=*) rounds="${value#ROUNDS=}"; named+="ROUNDS " ;;
            *) case "$named" in *" ${slot%%:*} "*) ;; *) [ "${slot%%:*}" = READS ] && reads="$value" || rounds="$value" ;; esac ;;
        esac
    done
    runs="$({{PY}} -c 'from ztbp import paths; print(paths.RUNS)')"
    loop="$runs/$(date -u +%Y%m%dT%H%M%SZ)-loop-paper80"
    t0=$SECONDS
    {{ZTBP}} loop paper80 --rounds "$rounds" --reads "$reads" --out "$loop" "${@:3}"
    echo "run: loop done in $((SECONDS - t0)) s; writing the HTML report (every notebook on the loop and its rounds: a few minutes)" >&2
    t1=$SECONDS
    {{ZTBP}} report "$loop" --rounds
    echo "run: report written in $((SECONDS - t1)) s" >&2
    echo "run: the HTML report is $({{PY}} -c 'from ztbp import paths; print(paths.REPORTS)')/$(basename "$loop")/index.html"

# capture a layer-by-layer run in the VM with `ztbp capture-layers` (FS raw|ext4|btrfs, ENGINE psync|io_uring|libaio, IODEPTH empty = 1 for psync, 4 otherwise) and print its Table-I breakdown
[group('capture')]
capture-layers FS="raw" ENGINE="psync" IODEPTH="" RUNTIME="5": setup deps
    #!/usr/bin/env bash
    set -euo pipefail
    runs="$({{PY}} -c 'from ztbp import paths; print(paths.RUNS)')"
    run="$runs/$(date -u +%Y%m%dT%H%M%SZ)-layers-"{{quote(FS)}}-{{quote(ENGINE)}}
    {{ZTBP}} capture-layers --out "$run" --fs {{quote(FS)}} --engine {{quote(ENGINE)}} --runtime {{quote(RUNTIME)}} {{ if IODEPTH == "" { "" } else { "--iodepth " + quote(IODEPTH) } }}
    {{ZTBP}} layers "$run" --by op,size
    {{ZTBP}} opcodes "$run"

# layer-probe overhead: fio IOPS without and with probes/layers.bt in one VM boot (ROUNDS rounds each) on guest SUITE; prints the ratio, its spread and the lost events
[group('test')]
bench-layers FS="ext4" ENGINE="psync" RUNTIME="5" ROUNDS="5" SUITE="bookworm": setup deps
    #!/usr/bin/env bash
    set -euo pipefail
    run="$(mktemp -d)/bench-layers"
    {{ZTBP}} capture-layers --out "$run" --fs {{quote(FS)}} --engine {{quote(ENGINE)}} --runtime {{quote(RUNTIME)}} --bench --bench-rounds {{quote(ROUNDS)}} --suite {{quote(SUITE)}}
    {{ZTBP}} layers "$run" | grep -E '^(probe overhead|[0-9]+ requests)'
