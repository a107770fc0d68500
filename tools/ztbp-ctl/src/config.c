/* cache-config.json ("ztbp-cache-config/1", probes/FORMAT.md): strict reading.
 *
 * Required: "format" (exactly "ztbp-cache-config/1") and "hot_zones" (array of zone ids, highest score
 * first). Every other key of the format is optional here, but when present it must have the documented
 * type; "zone_scores" must list the same zones as "hot_zones", in the same order. Unknown keys are
 * ignored (later minor additions). */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ztbp_ctl.h"

static int get_uint(const struct jnode *n, uint64_t max, uint64_t *out)
{
	if (!n || n->type != J_NUMBER || !n->is_int || n->ival < 0 || (uint64_t)n->ival > max)
		return -1;
	*out = (uint64_t)n->ival;
	return 0;
}

static const char *type_name(const struct jnode *n)
{
	switch (n->type) {
	case J_NULL: return "null";
	case J_FALSE:
	case J_TRUE: return "a boolean";
	case J_NUMBER: return n->is_int ? "an integer" : "a number";
	case J_STRING: return "a string";
	case J_ARRAY: return "an array";
	case J_OBJECT: return "an object";
	}
	return "?";
}

/* optional positive integer key */
static int opt_pos_int(const struct jdoc *d, const struct jnode *root, const char *key, int64_t *out,
		       struct zerr *err)
{
	const struct jnode *n = json_get(d, root, key);
	uint64_t v;

	*out = -1;
	if (!n)
		return 0;
	if (get_uint(n, UINT32_MAX, &v) || v == 0) {
		zerr_set(err, EX_CONFIG_SCHEMA, "config: \"%s\" must be a positive integer below 2^32 (got %s)", key,
			 type_name(n));
		return -1;
	}
	*out = (int64_t)v;
	return 0;
}

static int opt_type(const struct jdoc *d, const struct jnode *root, const char *key, enum jtype t,
		    const char *want, struct zerr *err)
{
	const struct jnode *n = json_get(d, root, key);

	if (n && n->type != t && !(t == J_NUMBER && n->type == J_NUMBER)) {
		zerr_set(err, EX_CONFIG_SCHEMA, "config: \"%s\" must be %s (got %s)", key, want, type_name(n));
		return -1;
	}
	if (n && t == J_NUMBER && (!n->is_int || n->ival < 0)) {
		zerr_set(err, EX_CONFIG_SCHEMA, "config: \"%s\" must be %s", key, want);
		return -1;
	}
	return 0;
}

static int parse_scores(const struct jdoc *d, const struct jnode *arr, struct cache_config *cfg,
			struct zerr *err)
{
	size_t c, i = 0;

	if (arr->type != J_ARRAY) {
		zerr_set(err, EX_CONFIG_SCHEMA, "config: \"zone_scores\" must be an array of objects (got %s)",
			 type_name(arr));
		return -1;
	}
	if (arr->n_children != cfg->n_hot) {
		zerr_set(err, EX_CONFIG_SCHEMA,
			 "config: \"zone_scores\" has %zu entries but \"hot_zones\" has %zu (one score per hot zone)",
			 arr->n_children, cfg->n_hot);
		return -1;
	}
	cfg->scores = calloc(arr->n_children ? arr->n_children : 1, sizeof *cfg->scores);
	if (!cfg->scores) {
		zerr_set(err, EX_INTERNAL, "out of memory");
		return -1;
	}
	for (c = arr->first_child; c && i < arr->n_children; c = d->nodes[c].next, i++) {
		const struct jnode *o = &d->nodes[c], *z, *r, *s;
		uint64_t zone, reads;

		if (o->type != J_OBJECT) {
			zerr_set(err, EX_CONFIG_SCHEMA, "config: zone_scores[%zu] must be an object (got %s)", i,
				 type_name(o));
			return -1;
		}
		z = json_get(d, o, "zone");
		r = json_get(d, o, "reads");
		s = json_get(d, o, "share");
		if (get_uint(z, UINT32_MAX, &zone)) {
			zerr_set(err, EX_CONFIG_SCHEMA,
				 "config: zone_scores[%zu].zone must be an integer zone id in 0..4294967295", i);
			return -1;
		}
		if (get_uint(r, INT64_MAX, &reads)) {
			zerr_set(err, EX_CONFIG_SCHEMA, "config: zone_scores[%zu].reads must be a non-negative integer",
				 i);
			return -1;
		}
		if (!s || s->type != J_NUMBER || !(s->dval >= 0.0 && s->dval <= 1.0)) {
			zerr_set(err, EX_CONFIG_SCHEMA, "config: zone_scores[%zu].share must be a number in [0, 1]", i);
			return -1;
		}
		if ((uint32_t)zone != cfg->hot_zones[i]) {
			zerr_set(err, EX_CONFIG_SCHEMA,
				 "config: zone_scores[%zu].zone is %llu but hot_zones[%zu] is %u (same zones, same order)",
				 i, (unsigned long long)zone, i, cfg->hot_zones[i]);
			return -1;
		}
		cfg->scores[i].zone = (uint32_t)zone;
		cfg->scores[i].reads = reads;
		cfg->scores[i].share = s->dval;
	}
	cfg->n_scores = arr->n_children;
	return 0;
}

/* "recommend" (optional boolean) and "recommend_reason" (optional string, already type-checked) */
static int parse_recommend(const struct jdoc *d, const struct jnode *root, struct cache_config *cfg,
			   struct zerr *err)
{
	const struct jnode *r = json_get(d, root, "recommend"), *why = json_get(d, root, "recommend_reason");

	cfg->recommend = -1;
	cfg->recommend_reason[0] = '\0';
	if (r && r->type != J_TRUE && r->type != J_FALSE) {
		zerr_set(err, EX_CONFIG_SCHEMA, "config: \"recommend\" must be true or false (got %s)", type_name(r));
		return -1;
	}
	if (r)
		cfg->recommend = r->type == J_TRUE;
	if (why && why->type == J_STRING) {
		/* one line in the error message: control characters become spaces; cut on a UTF-8 boundary */
		size_t cap = sizeof cfg->recommend_reason - 1;
		size_t n = why->str_len < cap ? why->str_len : cap, i;

		if (n < why->str_len)
			while (n > 0 && ((unsigned char)why->str[n] & 0xC0) == 0x80)
				n--;
		for (i = 0; i < n; i++) {
			unsigned char c = (unsigned char)why->str[i];
			cfg->recommend_reason[i] = (char)(c < 0x20 || c == 0x7f ? ' ' : c);
		}
		cfg->recommend_reason[n] = '\0';
	}
	return 0;
}

int config_parse(const char *text, size_t len, struct cache_config *cfg, struct zerr *err)
{
	struct jdoc d;
	const struct jnode *root, *fmt, *hot, *scores;
	char jerr[200];
	size_t c, i = 0;
	int rc = -1;

	memset(cfg, 0, sizeof *cfg);
	cfg->nr_zones = cfg->zone_size_lba = cfg->lba_bytes = -1;
	cfg->recommend = -1;
	if (len > CONFIG_MAX_BYTES) {
		zerr_set(err, EX_CONFIG_SIZE, "config: %zu bytes, more than the limit of %d bytes", len,
			 CONFIG_MAX_BYTES);
		return -1;
	}
	if (json_parse(text, len, &d, jerr, sizeof jerr)) {
		zerr_set(err, EX_CONFIG_JSON, "config: not valid JSON: %s", jerr);
		return -1;
	}
	root = &d.nodes[0];
	if (root->type != J_OBJECT) {
		zerr_set(err, EX_CONFIG_SCHEMA, "config: the top level must be an object (got %s)", type_name(root));
		goto out;
	}
	fmt = json_get(&d, root, "format");
	if (!fmt) {
		zerr_set(err, EX_CONFIG_FORMAT, "config: no \"format\" key; expected \"format\": \"%s\"",
			 CONFIG_FORMAT);
		goto out;
	}
	if (fmt->type != J_STRING || fmt->str_len != strlen(CONFIG_FORMAT) ||
	    memcmp(fmt->str, CONFIG_FORMAT, fmt->str_len) != 0) {
		struct sbuf got = {0};
		if (fmt->type == J_STRING && strlen(fmt->str) == fmt->str_len && fmt->str_len < 100)
			sb_json_string(&got, fmt->str);
		zerr_set(err, EX_CONFIG_FORMAT, "config: format is %s; this ztbp-ctl reads only \"%s\"",
			 got.p && !got.oom ? got.p : type_name(fmt), CONFIG_FORMAT);
		sb_free(&got);
		goto out;
	}
	hot = json_get(&d, root, "hot_zones");
	if (!hot || hot->type != J_ARRAY) {
		zerr_set(err, EX_CONFIG_SCHEMA, "config: \"hot_zones\" must be an array of zone ids (%s)",
			 hot ? type_name(hot) : "missing");
		goto out;
	}
	cfg->hot_zones = calloc(hot->n_children ? hot->n_children : 1, sizeof *cfg->hot_zones);
	if (!cfg->hot_zones) {
		zerr_set(err, EX_INTERNAL, "out of memory");
		goto out;
	}
	for (c = hot->first_child; c && i < hot->n_children; c = d.nodes[c].next, i++) {
		uint64_t z;
		if (get_uint(&d.nodes[c], UINT32_MAX, &z)) {
			zerr_set(err, EX_CONFIG_SCHEMA,
				 "config: hot_zones[%zu] must be an integer zone id in 0..4294967295 (got %s)", i,
				 type_name(&d.nodes[c]));
			goto out;
		}
		cfg->hot_zones[i] = (uint32_t)z;
	}
	cfg->n_hot = hot->n_children;
	if (opt_pos_int(&d, root, "nr_zones", &cfg->nr_zones, err) ||
	    opt_pos_int(&d, root, "zone_size_lba", &cfg->zone_size_lba, err) ||
	    opt_pos_int(&d, root, "lba_bytes", &cfg->lba_bytes, err) ||
	    opt_type(&d, root, "cache_mib", J_NUMBER, "a non-negative integer", err) ||
	    opt_type(&d, root, "source_run", J_STRING, "a string", err) ||
	    opt_type(&d, root, "created", J_STRING, "a string", err) ||
	    opt_type(&d, root, "predicted", J_OBJECT, "an object", err) ||
	    opt_type(&d, root, "cluster", J_OBJECT, "an object", err) ||
	    opt_type(&d, root, "held_out", J_OBJECT, "an object", err) ||
	    opt_type(&d, root, "recommend_reason", J_STRING, "a string", err) ||
	    parse_recommend(&d, root, cfg, err))
		goto out;
	scores = json_get(&d, root, "zone_scores");
	if (scores && parse_scores(&d, scores, cfg, err))
		goto out;
	rc = 0;
out:
	json_free(&d);
	if (rc)
		config_free(cfg);
	return rc;
}

int config_load(const char *path, struct cache_config *cfg, struct zerr *err)
{
	struct stat st;
	char *buf = NULL;
	size_t len = 0;
	int fd, rc;

	memset(cfg, 0, sizeof *cfg);
	fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
	if (fd < 0) {
		zerr_set(err, EX_CONFIG_READ, "config %s: cannot open: %s", path, strerror(errno));
		return -1;
	}
	if (fstat(fd, &st) || !S_ISREG(st.st_mode)) {
		zerr_set(err, EX_CONFIG_READ, "config %s: not a regular file", path);
		close(fd);
		return -1;
	}
	if (st.st_size > CONFIG_MAX_BYTES) {
		zerr_set(err, EX_CONFIG_SIZE, "config %s: %lld bytes, more than the limit of %d bytes", path,
			 (long long)st.st_size, CONFIG_MAX_BYTES);
		close(fd);
		return -1;
	}
	buf = malloc(CONFIG_MAX_BYTES + 1);
	if (!buf) {
		zerr_set(err, EX_INTERNAL, "out of memory");
		close(fd);
		return -1;
	}
	/* read up to one byte past the limit: the file may have grown since fstat */
	for (;;) {
		ssize_t n = read(fd, buf + len, CONFIG_MAX_BYTES + 1 - len);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0) {
			zerr_set(err, EX_CONFIG_READ, "config %s: read error: %s", path, strerror(errno));
			free(buf);
			close(fd);
			return -1;
		}
		if (n == 0)
			break;
		len += (size_t)n;
		if (len > CONFIG_MAX_BYTES)
			break;
	}
	close(fd);
	rc = config_parse(buf, len, cfg, err);
	free(buf);
	if (rc && strncmp(err->msg, "config: ", 8) == 0) {
		char tail[sizeof err->msg];
		snprintf(tail, sizeof tail, "%s", err->msg + 8);
		zerr_set(err, err->code, "config %s: %s", path, tail);
	}
	return rc;
}

void config_free(struct cache_config *cfg)
{
	free(cfg->hot_zones);
	free(cfg->scores);
	cfg->hot_zones = NULL;
	cfg->scores = NULL;
	cfg->n_hot = cfg->n_scores = 0;
}
