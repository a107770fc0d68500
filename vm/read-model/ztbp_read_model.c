// SPDX-License-Identifier: GPL-2.0-only
/*
 * ztbp_read_model.c - the project's read model for NVMeVirt's ZNS read path: which reads the device's cache hits,
 * what a hit and a miss cost, and whether a hit skips the NAND read. It is GPL-2.0 because it links into NVMeVirt's
 * GPL-2.0 module (../shared/nvmevirt/README.md, "A read model of your own"); none of its lines come from NVMeVirt.
 *
 * USAGE:
 *	../shared/nvmevirt/build.sh RELEASE --read-model vm/read-model/ztbp_read_model.c     (prints nvmev.ko's path)
 *	insmod nvmev.ko memmap_start=4G memmap_size=1025M cpus=1,2 [policy=... entries=... hit_ns=... ...]
 *	The fork as it is:   policy=fork hit_ns=-1 miss_ns=-1 shortcut=1 skip_nand=0
 *	A faithful device:   the defaults (zone_lru, a hit from controller DRAM, a miss priced as a ZN540 read)
 *
 * MODULE PARAMETERS (read-only once loaded; /sys/module/nvmev/parameters/ shows them):
 *	policy     fork: the fork's own cache as it is: a priority LRU keyed by the read's start LBA as a C int, an
 *	           entry keeping the priority it entered with (check off: 1; check on: 1 in a listed zone, else 2;
 *	           priority-1 entries are evicted only when no priority-2 entry is left);
 *	           lru: plain LRU of 4 KiB pages;
 *	           zone_lru (default): the ZTBP paper's Algorithm 4 over 4 KiB pages, as the project's ZoneLRU: a
 *	           page read in a zone of the last SET while the check is on enters or moves to the head of the hot
 *	           segment, any other to the head of the normal one (a hit takes the segment of THIS read).
 *	           lru and zone_lru look up every 4 KiB page of a read in order; the read is a hit when all its pages
 *	           were cached. fork looks up the start LBA once, whatever the read's length (as the fork does).
 *	entries    cache size in entries: start LBAs (fork) or 4 KiB pages (default 16384, the fork's size)
 *	hit_ns     firmware time of a hit, ns (default 6200; negative: the fork's, FW_READ_LATENCY x 1,000 in 32 bits)
 *	miss_ns    firmware time of a miss, ns (default 65000; negative: the fork's, FW_4KB_READ_LATENCY x 10^6 up to
 *	           4 KiB and FW_READ_LATENCY x 10^6 above, in 32 bits)
 *	shortcut   1: a miss in a listed zone while the check is on costs the fork's FW_4KB_READ_LATENCY x 7,000 ns
 *	           (7 us on zn540) instead of miss_ns (default 0)
 *	skip_nand  1: a hit is served from the controller's DRAM, without the NAND read (default 1); PCIe is paid
 *	           by every read
 *	The defaults' sources are in docs/metrics.md ("A device whose speed comes from its cache"). They are figures
 *	for --slow 1: a build made with --slow N scales the fork's charges (negative values) and its NAND model,
 *	not these.
 *
 * COUNTERS: every successful read adds one to nvmev_vdev->tot_rd_cnt and one to tot_hit_cnt or tot_fail_hit_cnt,
 * as the fork's block does (STATUS answers reads in dword 0 and hits in dword 1); a read in a listed zone while the
 * check is on adds one to that zone's cluster_info read_cnt, as the fork's zone check does.
 *
 * THE CORE: the cache and the charges (between the CORE markers) use no kernel header, so the unit test
 * (tests/test_read_model.py) compiles this same file in userspace with ZTBP_READ_MODEL_USERSPACE defined (after
 * typedefs of u8, u32, u64, s32, s64 and bool), through vm/read-model/core_harness.c. build.sh copies only this
 * file into NVMeVirt's source, so the core cannot live in a header of its own.
 *
 * The read path runs in NVMeVirt's one dispatcher thread (as the fork's cache, no lock): no sleeping and no
 * allocation there; init allocates the cache (kvzalloc), exit frees it. A failed allocation or an unknown policy
 * is logged and leaves no cache: every read then misses.
 *
 * CHECKED ON: Linux 6.1 (Debian 12 guest kernel 6.1.0-56-amd64), NVMeVirt's ZTBP fork as in
 * ../shared/nvmevirt, profile zn540; the core with gcc 12 in userspace.
 */

#ifndef ZTBP_READ_MODEL_USERSPACE
#include <linux/kernel.h>
#include <linux/module.h>
#include <linux/moduleparam.h>
#include <linux/slab.h>
#include <linux/string.h>
#include <linux/types.h>
#include "nvmev.h"
#include "ssd.h"
#include "zns_ftl.h"
#include "ztbp_read_model.h"
#endif

/* ==== CORE: no kernel header below this line, up to the END OF CORE marker ==================================== */

enum ztbp_policy { ZTBP_POLICY_FORK, ZTBP_POLICY_LRU, ZTBP_POLICY_ZONE_LRU, ZTBP_POLICY_UNKNOWN };

#define ZTBP_SEG_NORMAL 0
#define ZTBP_SEG_HOT 1
#define ZTBP_NODE0 2 /* nodes 0 and 1 are the sentinels of the normal and the hot segment; entries start at 2 */
#define ZTBP_MAX_ENTRIES (1u << 24)
#define ZTBP_SMALL_BYTES 4096

/*
 * A two-segment LRU: each segment a circular doubly linked list through its sentinel (head = next of the sentinel,
 * tail = its prev), the key -> node map a chained hash table. Node indices are u32; 0 ends a bucket's chain (no
 * entry is node 0). Memory is one zeroed block laid out by ztbp_cache_attach, sized by ztbp_cache_bytes.
 */
struct ztbp_cache {
	u32 entries; /* capacity */
	u32 used; /* nodes handed out; once full, a new key takes the evicted node */
	u32 mask; /* buckets - 1 (a power of two) */
	u32 len[2]; /* entries per segment */
	bool sticky; /* a hit keeps the segment the entry entered with (the fork's priority) */
	u64 *key;
	u32 *next, *prev, *chain, *bucket;
	u8 *seg;
};

static inline u32 ztbp_cache_buckets(u32 entries)
{
	u32 b = 1;

	while (b < 2 * entries)
		b <<= 1;
	return b;
}

static inline u64 ztbp_cache_bytes(u32 entries)
{
	u64 nodes = (u64)entries + ZTBP_NODE0;

	return nodes * (sizeof(u64) + 3 * sizeof(u32) + sizeof(u8)) + (u64)ztbp_cache_buckets(entries) * sizeof(u32);
}

/* Lay the cache out in `mem` (ztbp_cache_bytes(entries) zeroed bytes), empty. */
static inline void ztbp_cache_attach(struct ztbp_cache *c, void *mem, u32 entries, bool sticky)
{
	u32 nodes = entries + ZTBP_NODE0;
	u8 *p = mem;

	c->entries = entries;
	c->used = 0;
	c->mask = ztbp_cache_buckets(entries) - 1;
	c->len[0] = c->len[1] = 0;
	c->sticky = sticky;
	c->key = (u64 *)p;
	p += (u64)nodes * sizeof(u64);
	c->next = (u32 *)p;
	p += (u64)nodes * sizeof(u32);
	c->prev = (u32 *)p;
	p += (u64)nodes * sizeof(u32);
	c->chain = (u32 *)p;
	p += (u64)nodes * sizeof(u32);
	c->bucket = (u32 *)p;
	p += (u64)(c->mask + 1) * sizeof(u32);
	c->seg = p;
	c->next[ZTBP_SEG_NORMAL] = c->prev[ZTBP_SEG_NORMAL] = ZTBP_SEG_NORMAL;
	c->next[ZTBP_SEG_HOT] = c->prev[ZTBP_SEG_HOT] = ZTBP_SEG_HOT;
}

static inline u32 ztbp_cache_hash(const struct ztbp_cache *c, u64 key)
{
	return (u32)((key * 0x9E3779B97F4A7C15ull) >> 32) & c->mask;
}

static inline u32 ztbp_cache_find(const struct ztbp_cache *c, u64 key)
{
	u32 n;

	for (n = c->bucket[ztbp_cache_hash(c, key)]; n; n = c->chain[n])
		if (c->key[n] == key)
			return n;
	return 0;
}

static inline void ztbp_cache_unlink(struct ztbp_cache *c, u32 n)
{
	c->next[c->prev[n]] = c->next[n];
	c->prev[c->next[n]] = c->prev[n];
}

static inline void ztbp_cache_push(struct ztbp_cache *c, u32 s, u32 n)
{
	c->next[n] = c->next[s];
	c->prev[n] = s;
	c->prev[c->next[s]] = n;
	c->next[s] = n;
	c->seg[n] = (u8)s;
}

/* The least recent entry of the normal segment, or of the hot one when the normal one is empty, out of the cache;
 * returns its node for the new key. */
static inline u32 ztbp_cache_evict(struct ztbp_cache *c)
{
	u32 v = c->len[ZTBP_SEG_NORMAL] ? ZTBP_SEG_NORMAL : ZTBP_SEG_HOT;
	u32 t = c->prev[v];
	u32 *link = &c->bucket[ztbp_cache_hash(c, c->key[t])];

	ztbp_cache_unlink(c, t);
	c->len[v]--;
	while (*link != t)
		link = &c->chain[*link];
	*link = c->chain[t];
	return t;
}

/* Look `key` up; a hit moves it to the head of its segment (sticky: the one it entered with; else `hot`'s), a miss
 * enters it at the head of `hot`'s segment after evicting when full. Returns 1 for a hit. */
static inline int ztbp_cache_access(struct ztbp_cache *c, u64 key, bool hot)
{
	u32 s = hot ? ZTBP_SEG_HOT : ZTBP_SEG_NORMAL;
	u32 n = ztbp_cache_find(c, key), h;

	if (n) {
		ztbp_cache_unlink(c, n);
		if (c->sticky) {
			s = c->seg[n];
		} else if (c->seg[n] != s) {
			c->len[c->seg[n]]--;
			c->len[s]++;
		}
		ztbp_cache_push(c, s, n);
		return 1;
	}
	n = c->used < c->entries ? ZTBP_NODE0 + c->used++ : ztbp_cache_evict(c);
	c->key[n] = key;
	h = ztbp_cache_hash(c, key);
	c->chain[n] = c->bucket[h];
	c->bucket[h] = n;
	c->len[s]++;
	ztbp_cache_push(c, s, n);
	return 0;
}

/* The policy of a read model and the 4 KiB page size in LBAs (lru and zone_lru key by page). */
struct ztbp_model {
	struct ztbp_cache cache;
	enum ztbp_policy policy;
	u32 secs_per_pg;
};

/* Whether a read's entries go to the hot segment: the fork's priority 1 (the check off, or a listed zone) or
 * Algorithm 4's hot zone (a listed zone while the check is on); plain LRU has none. */
static inline bool ztbp_entry_hot(enum ztbp_policy policy, bool check_on, bool listed)
{
	if (policy == ZTBP_POLICY_FORK)
		return !check_on || listed;
	if (policy == ZTBP_POLICY_ZONE_LRU)
		return check_on && listed;
	return false;
}

/* One read of nr_lba LBAs from slba through the cache; `listed`: its zone is in the last SET (only counts while
 * check_on). Returns 1 when it hits. */
static inline int ztbp_model_read(struct ztbp_model *m, u64 slba, u64 nr_lba, bool check_on, bool listed)
{
	bool hot = ztbp_entry_hot(m->policy, check_on, listed);
	u64 page, last;
	int all = 1;

	if (m->policy == ZTBP_POLICY_FORK) /* the fork keys by the start LBA converted to a C int */
		return ztbp_cache_access(&m->cache, (u64)(s64)(s32)(u32)slba, hot);
	last = (slba + (nr_lba ? nr_lba : 1) - 1) / m->secs_per_pg;
	for (page = slba / m->secs_per_pg; page <= last; page++)
		all &= ztbp_cache_access(&m->cache, page, hot);
	return all;
}

/* What a hit and a miss cost: ns, or (negative) the fork's charge from the build's FW_* constants. */
struct ztbp_costs {
	s64 hit_ns, miss_ns;
	bool shortcut;
	s32 fw_4kb_rd_lat, fw_rd_lat; /* FW_4KB_READ_LATENCY, FW_READ_LATENCY as this build has them */
};

/* fw x factor as the fork computes it: in a 32-bit int that wraps, sign-extended into the 64-bit clock. */
static inline s64 ztbp_fork_charge(s32 fw, u32 factor)
{
	return (s64)(s32)((u32)fw * factor);
}

/* The firmware time of one read (ns; may be negative with the fork's wrapped charges). `listed` as above,
 * `nbytes` the read's length. */
static inline s64 ztbp_charge(const struct ztbp_costs *k, int hit, bool check_on, bool listed, u64 nbytes)
{
	if (hit)
		return k->hit_ns >= 0 ? k->hit_ns : ztbp_fork_charge(k->fw_rd_lat, 1000);
	if (k->shortcut && check_on && listed)
		return ztbp_fork_charge(k->fw_4kb_rd_lat, 7000);
	if (k->miss_ns >= 0)
		return k->miss_ns;
	return ztbp_fork_charge(nbytes <= ZTBP_SMALL_BYTES ? k->fw_4kb_rd_lat : k->fw_rd_lat, 1000000);
}

static inline enum ztbp_policy ztbp_policy_of(const char *name)
{
	static const char *const names[] = { "fork", "lru", "zone_lru" };
	unsigned int i, j;

	for (i = 0; i < 3; i++) {
		for (j = 0; names[i][j] && names[i][j] == name[j]; j++)
			;
		/* a trailing newline is allowed: sysfs and insmod pass the value as written */
		if (!names[i][j] && (!name[j] || (name[j] == '\n' && !name[j + 1])))
			return (enum ztbp_policy)i;
	}
	return ZTBP_POLICY_UNKNOWN;
}

/* ==== END OF CORE ============================================================================================== */

#ifndef ZTBP_READ_MODEL_USERSPACE

static char *policy = "zone_lru";
module_param(policy, charp, 0444);
MODULE_PARM_DESC(policy, "read cache policy: fork (the fork's priority LRU by start LBA), lru, zone_lru (default)");
static unsigned int entries = 16384;
module_param(entries, uint, 0444);
MODULE_PARM_DESC(entries, "cache size in entries: start LBAs (fork) or 4 KiB pages (default 16384)");
static long hit_ns = 6200;
module_param(hit_ns, long, 0444);
MODULE_PARM_DESC(hit_ns, "firmware ns of a hit (default 6200; negative: the fork's FW_READ_LATENCY x 1,000)");
static long miss_ns = 65000;
module_param(miss_ns, long, 0444);
MODULE_PARM_DESC(miss_ns, "firmware ns of a miss (default 65000; negative: the fork's FW_*READ_LATENCY x 10^6)");
static bool shortcut;
module_param(shortcut, bool, 0444);
MODULE_PARM_DESC(shortcut, "a listed-zone miss with the check on costs the fork's FW_4KB_READ_LATENCY x 7,000 ns");
static bool skip_nand = true;
module_param(skip_nand, bool, 0444);
MODULE_PARM_DESC(skip_nand, "a hit is served from DRAM without the NAND read (default 1)");

static struct ztbp_model model;
static struct ztbp_costs costs;
static void *cache_mem; /* NULL: no cache, every read misses */
static struct zns_ftl *owner; /* the namespace whose init made the cache: its exit frees it */

void ztbp_read_model_init(struct zns_ftl *zns_ftl)
{
	struct ssdparams *spp = &zns_ftl->ssd->sp;

	if (owner) {
		pr_err("ztbp_read_model: a second namespace shares the first one's cache\n");
		return;
	}
	owner = zns_ftl;
	model.policy = ztbp_policy_of(policy);
	model.secs_per_pg = spp->secs_per_pg > 0 ? spp->secs_per_pg : 1;
	costs = (struct ztbp_costs){ .hit_ns = hit_ns < 0 ? -1 : hit_ns, .miss_ns = miss_ns < 0 ? -1 : miss_ns,
				     .shortcut = shortcut, .fw_4kb_rd_lat = spp->fw_4kb_rd_lat,
				     .fw_rd_lat = spp->fw_rd_lat };
	if (model.policy == ZTBP_POLICY_UNKNOWN) {
		pr_err("ztbp_read_model: unknown policy '%s' (fork, lru, zone_lru): no cache, every read misses\n",
		       policy);
		return;
	}
	if (entries < 1 || entries > ZTBP_MAX_ENTRIES) {
		pr_err("ztbp_read_model: entries=%u is outside 1..%u: no cache, every read misses\n", entries,
		       ZTBP_MAX_ENTRIES);
		return;
	}
	cache_mem = kvzalloc(ztbp_cache_bytes(entries), GFP_KERNEL);
	if (!cache_mem) {
		pr_err("ztbp_read_model: no memory for %u entries: no cache, every read misses\n", entries);
		return;
	}
	ztbp_cache_attach(&model.cache, cache_mem, entries, model.policy == ZTBP_POLICY_FORK);
	pr_info("ztbp_read_model: policy=%s entries=%u keyed by %s hit=%lld ns miss=%lld ns (4 KiB) shortcut=%d "
		"skip_nand=%d\n", policy, entries, model.policy == ZTBP_POLICY_FORK ? "start LBA" : "4 KiB page",
		ztbp_charge(&costs, 1, false, false, ZTBP_SMALL_BYTES),
		ztbp_charge(&costs, 0, false, false, ZTBP_SMALL_BYTES), shortcut, skip_nand);
}

void ztbp_read_model_exit(struct zns_ftl *zns_ftl)
{
	if (zns_ftl != owner)
		return;
	kvfree(cache_mem);
	cache_mem = NULL;
	owner = NULL;
}

/* Whether zone zid is in the last SET, counting the read in its cluster_info as the fork's zone check does. */
static bool ztbp_zone_listed(u32 zid)
{
	unsigned int i;

	for (i = 0; i < ARRAY_SIZE(nvmev_vdev->cluster_info); i++) {
		if (nvmev_vdev->cluster_info[i].zid == zid) {
			nvmev_vdev->cluster_info[i].read_cnt++;
			return true;
		}
	}
	return false;
}

uint64_t ztbp_read_model(struct zns_ftl *zns_ftl, uint32_t zid, uint64_t slba, uint64_t nr_lba, uint32_t status,
			 uint64_t nsecs_latest, int *skip_nand_out)
{
	bool check_on, listed;
	int hit;

	if (status != NVME_SC_SUCCESS)
		return nsecs_latest;
	check_on = nvmev_vdev->en_cluster_chk;
	listed = check_on && ztbp_zone_listed(zid);
	hit = cache_mem ? ztbp_model_read(&model, slba, nr_lba, check_on, listed) : 0;
	nvmev_vdev->tot_rd_cnt++;
	if (hit) {
		nvmev_vdev->tot_hit_cnt++;
		*skip_nand_out = skip_nand;
	} else {
		nvmev_vdev->tot_fail_hit_cnt++;
	}
	return nsecs_latest + (u64)ztbp_charge(&costs, hit, check_on, listed, nr_lba * zns_ftl->ssd->sp.secsz);
}

#endif /* !ZTBP_READ_MODEL_USERSPACE */
