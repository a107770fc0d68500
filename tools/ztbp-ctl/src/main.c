/* ztbp-ctl: the hot-zone cache configuration helper (see tools/ztbp-ctl/README.md). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ztbp_ctl.h"

static const char *exit_name(int code)
{
	size_t i;

	for (i = 0; i < ztbp_exit_codes_n; i++)
		if (ztbp_exit_codes[i].code == code)
			return ztbp_exit_codes[i].name;
	return "unknown";
}

static int emit(struct sbuf *b)
{
	if (b->oom) {
		fprintf(stderr, "ztbp-ctl: error: out of memory\n");
		sb_free(b);
		return EX_INTERNAL;
	}
	if (b->len)
		fwrite(b->p, 1, b->len, stdout);
	sb_free(b);
	if (fflush(stdout) != 0) {
		fprintf(stderr, "ztbp-ctl: error: cannot write the output\n");
		return EX_INTERNAL;
	}
	return EX_OK;
}

static int fail(int json, const struct zerr *e)
{
	fprintf(stderr, "ztbp-ctl: error: %s\n", e->msg);
	if (json) {
		struct sbuf b = {0};
		sb_printf(&b, "{\"ok\": false, \"exit_code\": %d, \"error\": \"%s\", \"message\": ", e->code,
			  exit_name(e->code));
		sb_json_string(&b, e->msg);
		sb_printf(&b, "}\n");
		emit(&b);
	}
	return e->code;
}

static int cmd_geometry(const struct options *o)
{
	struct device d;
	struct zerr e = {0, ""};
	struct sbuf b = {0};

	if (device_open(o->dev, &d, &e)) {
		device_close(&d);
		return fail(o->json, &e);
	}
	if (!d.is_nvme) { /* decided from sysfs alone: nothing is sent to another driver's device */
		device_close(&d);
		zerr_set(&e, EX_NOT_NVME, "%s is not an NVMe device by its sysfs entry; nothing was sent (give e.g. "
			 "/dev/nvme0n1, /dev/ng0n1 or /dev/nvme0)", o->dev);
		return fail(o->json, &e);
	}
	if (device_probe(&d, o->nsid, 1, &e)) {
		device_close(&d);
		return fail(o->json, &e);
	}
	device_close(&d);
	if (!d.is_nvme) {
		zerr_set(&e, EX_NOT_NVME, "%s does not answer NVMe Identify; nothing else was sent", o->dev);
		return fail(o->json, &e);
	}
	if (!d.zoned) {
		zerr_set(&e, EX_NOT_ZONED, "%s is not a zoned device", o->dev);
		return fail(o->json, &e);
	}
	if (o->json) {
		sb_printf(&b, "{\"ok\": true, \"device\": ");
		sb_json_string(&b, o->dev);
		sb_printf(&b,
			  ", \"source\": \"%s\", \"nvme\": %s, \"nsid\": %u, \"lba_bytes\": %u, \"nr_zones\": %u, "
			  "\"zone_size_lba\": %llu, \"zone_size_sectors\": %llu, \"zone_size_bytes\": %llu",
			  d.source, d.is_nvme ? "true" : "false", d.nsid, d.lba_bytes, d.nr_zones,
			  (unsigned long long)d.zone_size_lba, (unsigned long long)(d.zone_size_bytes / 512),
			  (unsigned long long)d.zone_size_bytes);
		if (d.have_report)
			sb_printf(&b,
				  ", \"zone_cap_lba\": %llu, \"zone_cap_sectors\": %llu, \"zone_cap_bytes\": %llu, "
				  "\"zone_cap_max_sectors\": %llu, \"capacity_reported\": %s, \"conventional_zones\": %u}\n",
				  (unsigned long long)(d.zone_cap_min_sectors * 512 / d.lba_bytes),
				  (unsigned long long)d.zone_cap_min_sectors,
				  (unsigned long long)d.zone_cap_min_sectors * 512,
				  (unsigned long long)d.zone_cap_max_sectors, d.capacity_reported ? "true" : "false",
				  d.conventional_zones);
		else
			sb_printf(&b, ", \"zone_cap_lba\": null, \"zone_cap_sectors\": null, \"zone_cap_bytes\": null, "
				      "\"zone_cap_max_sectors\": null, \"capacity_reported\": false, "
				      "\"conventional_zones\": null}\n");
	} else {
		sb_printf(&b, "device       %s (%s%s)\n", o->dev, d.is_nvme ? "NVMe, " : "", d.source);
		sb_printf(&b, "lba          %u bytes\n", d.lba_bytes);
		sb_printf(&b, "zones        %u\n", d.nr_zones);
		sb_printf(&b, "zone size    %llu LBAs = %llu sectors = %llu MiB\n", (unsigned long long)d.zone_size_lba,
			  (unsigned long long)(d.zone_size_bytes / 512),
			  (unsigned long long)(d.zone_size_bytes >> 20));
		if (d.have_report) {
			sb_printf(&b, "zone cap     %llu LBAs = %llu sectors", (unsigned long long)(d.zone_cap_min_sectors * 512 / d.lba_bytes),
				  (unsigned long long)d.zone_cap_min_sectors);
			if (d.zone_cap_max_sectors != d.zone_cap_min_sectors)
				sb_printf(&b, " (smallest; largest %llu sectors)", (unsigned long long)d.zone_cap_max_sectors);
			sb_printf(&b, "\nconventional %u\n", d.conventional_zones);
		} else {
			sb_printf(&b, "zone cap     unknown (use the namespace block device)\n");
		}
	}
	return emit(&b);
}

static int cmd_ztbp(const struct options *o)
{
	struct cache_config cfg;
	int have_cfg = 0, rc;
	struct zerr e = {0, ""};
	struct device d;
	struct ztbp_command cmd;
	uint32_t zones[ZTBP_MAX_ZONES], dw0;
	uint64_t result = 0;
	unsigned long long answered = 0;
	size_t n = 0;
	struct sbuf b = {0};
	int64_t nr_zones = -1;
	const char *nr_src = "config's";

	memset(&cfg, 0, sizeof cfg);
	memset(&d, 0, sizeof d);
	d.fd = -1;
	if (o->config) {
		if (config_load(o->config, &cfg, &e))
			return fail(o->json, &e);
		have_cfg = 1;
		nr_zones = cfg.nr_zones;
		/* refused before any device is opened; a config without zones is refused as no-zones below */
		if (o->cmd == CMD_SET && cfg.n_hot > 0 && cfg.recommend == 0 && !o->force) {
			zerr_set(&e, EX_NOT_RECOMMENDED, "the config is not recommended: %s (--force sends it anyway)",
				 cfg.recommend_reason[0] ? cfg.recommend_reason : "\"recommend\": false");
			goto bad;
		}
	}
	if (!o->dry_run) {
		if (device_open(o->dev, &d, &e) || device_probe(&d, o->nsid, 0, &e))
			goto bad;
		if (!d.is_nvme) { /* even with --force: an NVMe ioctl may mean something else to another driver */
			zerr_set(&e, EX_NOT_NVME, "%s is not an NVMe device; nothing was sent (give e.g. /dev/nvme0n1)",
				 o->dev);
			goto bad;
		}
		if (!d.zoned && !o->force) {
			zerr_set(&e, EX_NOT_ZONED, "%s is not a zoned namespace (--force sends anyway)", o->dev);
			goto bad;
		}
		if (d.zoned) {
			if (have_cfg && !o->force && !config_geometry_matches(&cfg, d.nr_zones, d.zone_size_bytes)) {
				zerr_set(&e, EX_GEOMETRY_MISMATCH,
					 "the config was made for %lld zones of %lld LBAs of %lld bytes, %s has %u zones of "
					 "%llu bytes (--force sends anyway)",
					 (long long)cfg.nr_zones, (long long)cfg.zone_size_lba, (long long)cfg.lba_bytes,
					 o->dev, d.nr_zones, (unsigned long long)d.zone_size_bytes);
				goto bad;
			}
			nr_zones = d.nr_zones;
			nr_src = "device's";
		}
	}
	if (o->cmd == CMD_SET && select_zones(o, have_cfg ? &cfg : NULL, nr_zones, nr_src, zones, &n, &e))
		goto bad;
	if (ztbp_encode(o, zones, n, &cmd, &e))
		goto bad;
	if (o->dry_run) {
		sb_printf(&b, "{\"ok\": true, ");
		command_json(&b, &cmd, o->dev, 1);
		sb_printf(&b, "}\n");
		config_free(&cfg);
		return emit(&b);
	}
	if (device_send(&d, &cmd, &result, &e))
		goto bad;
	dw0 = (uint32_t)(result & 0xffffffffu);
	answered = zsys_mono_ns(); /* when the device's answer came back: a caller lines it up with traced commands */
	device_close(&d);
	config_free(&cfg);
	if (o->json) {
		sb_printf(&b, "{\"ok\": true, ");
		command_json(&b, &cmd, o->dev, 0);
		sb_printf(&b, ", \"nvme_status\": 0, \"result\": %u", dw0);
		if (d.result_dwords == 2)
			sb_printf(&b, ", \"result_dw1\": %u", (uint32_t)(result >> 32));
		if (o->cmd == CMD_STATUS && d.result_dwords == 2)
			sb_printf(&b, ", \"reads\": %u, \"hits\": %u, \"status_ioctl\": \"admin64\"", dw0,
				  (uint32_t)(result >> 32));
		else if (o->cmd == CMD_STATUS)
			sb_printf(&b, ", \"reads\": %u, \"hits\": null, \"status_ioctl\": \"admin32\", \"status_note\": "
				      "\"the kernel lacks NVME_IOCTL_ADMIN64_CMD: completion dword 1 (hits) is not answered\"",
				  dw0);
		if (answered)
			sb_printf(&b, ", \"answered_mono_ns\": %llu", answered);
		sb_printf(&b, "}\n");
	} else if (o->cmd == CMD_SET) {
		size_t i;
		sb_printf(&b, "set: %s accepted hot zones ", o->dev);
		for (i = 0; i < n; i++)
			sb_printf(&b, "%s%u", i ? "," : "", zones[i]);
		sb_printf(&b, " (opcode 0x%02x, cdw10 %u, result %u)\n", cmd.opcode, cmd.cdw[0], dw0);
	} else if (o->cmd == CMD_STATUS && d.result_dwords == 2) {
		sb_printf(&b, "status: %s has counted %u reads and %u cache hits (result dwords 0 and 1)\n", o->dev,
			  dw0, (uint32_t)(result >> 32));
	} else if (o->cmd == CMD_STATUS) {
		sb_printf(&b, "status: %s has counted %u reads (result dword 0; the kernel lacks the 64-bit admin ioctl, "
			      "so the hits of dword 1 are not answered)\n", o->dev, dw0);
	} else {
		sb_printf(&b, "%s: %s accepted (opcode 0x%02x, cdw10 %u, result 0x%08x)\n", cmd.name, o->dev,
			  cmd.opcode, cmd.cdw[0], dw0);
	}
	return emit(&b);
bad:
	rc = fail(o->json, &e);
	device_close(&d);
	config_free(&cfg);
	return rc;
}

int main(int argc, char *argv[])
{
	struct options o;
	struct zerr e = {0, ""};
	struct sbuf b = {0};
	int i, json = 0;

	for (i = 1; i < argc && strcmp(argv[i], "--") != 0; i++)
		if (strcmp(argv[i], "--json") == 0)
			json = 1;
	if (cli_parse(argc, argv, &o, &e)) {
		fail(json, &e);
		if (e.code == EX_USAGE)
			fprintf(stderr, "ztbp-ctl: run 'ztbp-ctl --help' for the commands, options and exit codes\n");
		return e.code;
	}
	switch (o.cmd) {
	case CMD_HELP:
		usage_text(&b);
		return emit(&b);
	case CMD_VERSION:
		sb_printf(&b, "ztbp-ctl %s\n", ZTBP_CTL_VERSION);
		return emit(&b);
	case CMD_GEOMETRY:
		return cmd_geometry(&o);
	default:
		return cmd_ztbp(&o);
	}
}
