// SPDX-License-Identifier: GPL-2.0-only
/*
 * core_harness.c - the core of ztbp_read_model.c (its cache and charges) run in userspace on a trace, for the unit
 * test (tests/test_read_model.py). GPL-2.0 as the file it includes.
 *
 * USAGE:
 *	cc -O2 -o core_harness vm/read-model/core_harness.c
 *	core_harness POLICY ENTRIES SECS_PER_PG SECSZ HIT_NS MISS_NS SHORTCUT FW_4KB_READ FW_READ < trace
 *	POLICY is fork, lru or zone_lru; HIT_NS / MISS_NS negative: the fork's charges from FW_4KB_READ and FW_READ
 *	(FW_4KB_READ_LATENCY and FW_READ_LATENCY, 1 and 130 on zn540).
 *
 * TRACE (one command a line, as the device sees them):
 *	R SLBA NLB ZONE   a read of NLB LBAs from SLBA in zone ZONE
 *	S Z...            SET: the check on, zones Z... listed (up to five)
 *	T                 STOP: the check off (the listed zones are kept, as the device keeps them)
 * OUTPUT: one line per read, "HIT FIRMWARE_NS" (HIT 1 or 0). Exit 2 on bad arguments or a bad line.
 */

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef uint8_t u8;
typedef uint32_t u32;
typedef uint64_t u64;
typedef int32_t s32;
typedef int64_t s64;

#define ZTBP_READ_MODEL_USERSPACE
#include "ztbp_read_model.c"

#define LISTED_MAX 5

static int bad(const char *what)
{
	fprintf(stderr, "core_harness: %s\n", what);
	return 2;
}

int main(int argc, char **argv)
{
	struct ztbp_model m;
	struct ztbp_costs k;
	unsigned long long slba, nlb, zone, entries;
	u32 listed[LISTED_MAX];
	int n_listed = 0, i;
	bool check_on = false;
	char line[256];
	void *mem;

	if (argc != 10)
		return bad("usage: core_harness POLICY ENTRIES SECS_PER_PG SECSZ HIT_NS MISS_NS SHORTCUT FW_4KB FW_READ");
	m.policy = ztbp_policy_of(argv[1]);
	entries = strtoull(argv[2], NULL, 10);
	m.secs_per_pg = (u32)strtoul(argv[3], NULL, 10);
	if (m.policy == ZTBP_POLICY_UNKNOWN || entries < 1 || entries > ZTBP_MAX_ENTRIES || m.secs_per_pg < 1)
		return bad("bad policy, entries or secs_per_pg");
	u32 secsz = (u32)strtoul(argv[4], NULL, 10);
	k.hit_ns = strtoll(argv[5], NULL, 10);
	k.miss_ns = strtoll(argv[6], NULL, 10);
	k.shortcut = atoi(argv[7]) != 0;
	k.fw_4kb_rd_lat = (s32)atoi(argv[8]);
	k.fw_rd_lat = (s32)atoi(argv[9]);
	mem = calloc(1, ztbp_cache_bytes((u32)entries));
	if (!mem)
		return bad("no memory");
	ztbp_cache_attach(&m.cache, mem, (u32)entries, m.policy == ZTBP_POLICY_FORK);
	while (fgets(line, sizeof(line), stdin)) {
		if (line[0] == 'R') {
			if (sscanf(line + 1, "%llu %llu %llu", &slba, &nlb, &zone) != 3)
				return bad("bad read line");
			bool in = false;
			for (i = 0; i < n_listed; i++)
				in = in || listed[i] == (u32)zone;
			bool is_listed = check_on && in;
			int hit = ztbp_model_read(&m, slba, nlb, check_on, is_listed);
			printf("%d %lld\n", hit, (long long)ztbp_charge(&k, hit, check_on, is_listed, nlb * secsz));
		} else if (line[0] == 'S') {
			char *p = line + 1, *end;
			for (n_listed = 0; n_listed < LISTED_MAX; n_listed++) {
				unsigned long z = strtoul(p, &end, 10);
				if (end == p)
					break;
				listed[n_listed] = (u32)z;
				p = end;
			}
			check_on = true;
		} else if (line[0] == 'T') {
			check_on = false;
		} else if (line[0] != '\n') {
			return bad("unknown line (R, S or T)");
		}
	}
	free(mem);
	return 0;
}
