/* The ZTBP vendor admin command: zone selection, encoding, JSON rendering, NVMe status names. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ztbp_ctl.h"

int ztbp_sub_valid(uint32_t cdw10)
{
	return cdw10 == ZSUB_SET || cdw10 == ZSUB_INFO || cdw10 == ZSUB_STATUS || cdw10 == ZSUB_STOP;
}

static int cmp_u32(const void *a, const void *b)
{
	uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
	return (x > y) - (x < y);
}

/* first id listed twice in z[0..n), via a sorted copy */
static int find_duplicate(const uint32_t *z, size_t n, uint32_t *dup, struct zerr *err)
{
	uint32_t *s;
	size_t i;
	int found = 0;

	if (n < 2)
		return 0;
	s = malloc(n * sizeof *s);
	if (!s) {
		zerr_set(err, EX_INTERNAL, "out of memory");
		return -1;
	}
	memcpy(s, z, n * sizeof *s);
	qsort(s, n, sizeof *s, cmp_u32);
	for (i = 1; i < n; i++) {
		if (s[i] == s[i - 1]) {
			*dup = s[i];
			found = 1;
			break;
		}
	}
	free(s);
	return found;
}

/* 0 when every id in z[0..n) is distinct, else -1 with EX_ZONE_DUP (or EX_INTERNAL) */
static int check_distinct(const uint32_t *z, size_t n, const char *who, struct zerr *err)
{
	uint32_t dup;
	int r = find_duplicate(z, n, &dup, err);

	if (r > 0)
		zerr_set(err, EX_ZONE_DUP, "%s zone %u twice", who, dup);
	return r ? -1 : 0;
}

struct ranked {
	const struct zone_score *s;
	size_t index;
};

/* highest share first, then more reads, then the config's order */
static int cmp_ranked(const void *a, const void *b)
{
	const struct ranked *x = a, *y = b;

	if (x->s->share != y->s->share)
		return x->s->share > y->s->share ? -1 : 1;
	if (x->s->reads != y->s->reads)
		return x->s->reads > y->s->reads ? -1 : 1;
	return (x->index > y->index) - (x->index < y->index);
}

int select_zones(const struct options *o, const struct cache_config *cfg, int64_t nr_zones,
		 const char *nr_zones_source, uint32_t out[ZTBP_MAX_ZONES], size_t *n, struct zerr *err)
{
	size_t i, k = 0;

	*n = 0;
	if (o->have_zones) {
		if (o->n_zones > ZTBP_MAX_ZONES) {
			zerr_set(err, EX_TOO_MANY_ZONES, "--zones lists %zu zones; one SET carries at most %d",
				 o->n_zones, ZTBP_MAX_ZONES);
			return -1;
		}
		if (check_distinct(o->zones, o->n_zones, "--zones lists", err))
			return -1;
		memcpy(out, o->zones, o->n_zones * sizeof *out);
		k = o->n_zones;
	} else {
		if (!cfg || cfg->n_hot == 0) {
			zerr_set(err, EX_NO_ZONES, "the config lists no hot zones: nothing to send");
			return -1;
		}
		if (check_distinct(cfg->hot_zones, cfg->n_hot, "the config lists hot", err))
			return -1;
		if (cfg->nr_zones >= 0) {
			for (i = 0; i < cfg->n_hot; i++) {
				if ((int64_t)cfg->hot_zones[i] >= cfg->nr_zones) {
					zerr_set(err, EX_ZONE_RANGE,
						 "the config lists hot zone %u but its nr_zones is %lld (zones 0..%lld)",
						 cfg->hot_zones[i], (long long)cfg->nr_zones,
						 (long long)cfg->nr_zones - 1);
					return -1;
				}
			}
		}
		if (cfg->n_hot > ZTBP_MAX_ZONES && !o->top5) {
			zerr_set(err, EX_TOO_MANY_ZONES,
				 "the config lists %zu hot zones; one SET carries at most %d (--top5 sends the five "
				 "highest-scored)",
				 cfg->n_hot, ZTBP_MAX_ZONES);
			return -1;
		}
		if (cfg->n_hot > ZTBP_MAX_ZONES && cfg->scores) {
			struct ranked *rk = malloc(cfg->n_scores * sizeof *rk);
			if (!rk) {
				zerr_set(err, EX_INTERNAL, "out of memory");
				return -1;
			}
			for (i = 0; i < cfg->n_scores; i++) {
				rk[i].s = &cfg->scores[i];
				rk[i].index = i;
			}
			qsort(rk, cfg->n_scores, sizeof *rk, cmp_ranked);
			for (k = 0; k < ZTBP_MAX_ZONES; k++)
				out[k] = rk[k].s->zone;
			free(rk);
		} else {
			/* hot_zones is ordered highest score first */
			for (k = 0; k < cfg->n_hot && k < ZTBP_MAX_ZONES; k++)
				out[k] = cfg->hot_zones[k];
		}
	}
	if (nr_zones >= 0) {
		for (i = 0; i < k; i++) {
			if ((int64_t)out[i] >= nr_zones) {
				zerr_set(err, EX_ZONE_RANGE, "zone %u is not below the %s zone count %lld (zones 0..%lld)",
					 out[i], nr_zones_source, (long long)nr_zones, (long long)nr_zones - 1);
				return -1;
			}
		}
	}
	*n = k;
	return 0;
}

int ztbp_encode(const struct options *o, const uint32_t *zones, size_t n, struct ztbp_command *cmd,
		struct zerr *err)
{
	size_t i;

	memset(cmd, 0, sizeof *cmd);
	switch (o->cmd) {
	case CMD_SET: cmd->name = "set"; cmd->cdw[0] = ZSUB_SET; break;
	case CMD_INFO: cmd->name = "info"; cmd->cdw[0] = ZSUB_INFO; break;
	case CMD_STATUS: cmd->name = "status"; cmd->cdw[0] = ZSUB_STATUS; break;
	case CMD_STOP: cmd->name = "stop"; cmd->cdw[0] = ZSUB_STOP; break;
	default:
		zerr_set(err, EX_INTERNAL, "internal error: no ZTBP sub-command for this command");
		return -1;
	}
	if (o->cmd == CMD_SET ? (n < 1 || n > ZTBP_MAX_ZONES) : n != 0) {
		zerr_set(err, EX_INTERNAL, "internal error: %zu zones for %s", n, cmd->name);
		return -1;
	}
	cmd->opcode = o->opcode;
	cmd->nsid = o->nsid;
	cmd->timeout_ms = o->timeout_ms;
	for (i = 0; i < n; i++)
		cmd->zones[i] = zones[i];
	cmd->n_zones = n;
	/* cdw11..cdw15: the zones; fewer than five repeat the last one, so the device is never told about
	 * a zone that was not asked for (0 would name zone 0) */
	for (i = 0; i < ZTBP_MAX_ZONES && n; i++)
		cmd->cdw[1 + i] = zones[i < n ? i : n - 1];
	if (!ztbp_sub_valid(cmd->cdw[0])) {
		zerr_set(err, EX_INTERNAL, "internal error: sub-command %u refused", cmd->cdw[0]);
		return -1;
	}
	return 0;
}

int opcode_allowed(uint8_t opcode)
{
	return opcode == ZTBP_DEFAULT_OPCODE || (opcode > 0x86 && (opcode & 3u) == 0);
}

int config_geometry_matches(const struct cache_config *cfg, uint32_t nr_zones, uint64_t zone_size_bytes)
{
	if (cfg->nr_zones >= 0 && cfg->nr_zones != (int64_t)nr_zones)
		return 0;
	if (cfg->zone_size_lba > 0 && cfg->lba_bytes > 0) {
		uint64_t lbas = (uint64_t)cfg->zone_size_lba, bytes = (uint64_t)cfg->lba_bytes;
		if (lbas > UINT64_MAX / bytes || lbas * bytes != zone_size_bytes)
			return 0;
	}
	return 1;
}

void command_json(struct sbuf *b, const struct ztbp_command *cmd, const char *dev, int dry_run)
{
	size_t i;

	sb_printf(b, "\"command\": \"%s\", \"dry_run\": %s, \"device\": ", cmd->name, dry_run ? "true" : "false");
	sb_json_string(b, dev);
	sb_printf(b, ", \"opcode\": %u, \"nsid\": %u", cmd->opcode, cmd->nsid);
	for (i = 0; i < 6; i++)
		sb_printf(b, ", \"cdw%zu\": %u", 10 + i, cmd->cdw[i]);
	sb_printf(b, ", \"timeout_ms\": %u, \"zones\": [", cmd->timeout_ms);
	for (i = 0; i < cmd->n_zones; i++)
		sb_printf(b, "%s%u", i ? ", " : "", cmd->zones[i]);
	sb_printf(b, "]");
}

const char *nvme_status_name(unsigned status)
{
	unsigned sct = (status >> 8) & 0x7, sc = status & 0xff;

	if (sct == 0) {
		switch (sc) {
		case 0x00: return "Successful Completion";
		case 0x01: return "Invalid Command Opcode";
		case 0x02: return "Invalid Field in Command";
		case 0x03: return "Command ID Conflict";
		case 0x04: return "Data Transfer Error";
		case 0x05: return "Commands Aborted due to Power Loss Notification";
		case 0x06: return "Internal Error";
		case 0x07: return "Command Abort Requested";
		case 0x08: return "Command Aborted due to SQ Deletion";
		case 0x0b: return "Invalid Namespace or Format";
		case 0x0c: return "Command Sequence Error";
		case 0x0f: return "Invalid Use of Controller Memory Buffer";
		case 0x1d: return "Command Interrupted";
		}
	} else if (sct == 1) {
		switch (sc) {
		case 0x0b: return "Invalid Format";
		case 0x15: return "Namespace Insufficient Capacity";
		}
	} else if (sct == 3) {
		switch (sc) {
		case 0x00: return "Internal Path Error";
		case 0x70: return "Host Pathing Error";
		case 0x71: return "Command Aborted By Host";
		}
	} else if (sct == 7) {
		return "Vendor Specific";
	}
	switch (sct) {
	case 0: return "Generic Command Status (unnamed code)";
	case 1: return "Command Specific Status";
	case 2: return "Media and Data Integrity Error";
	case 3: return "Path Related Status";
	default: return "Reserved Status Code Type";
	}
}
