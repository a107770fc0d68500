/* A small strict JSON parser (RFC 8259): one value, no comments, no trailing commas, no leading zeros,
 * no NaN/Infinity, strings must be valid UTF-8 without raw control characters, \u escapes must pair
 * surrogates, duplicate object keys are rejected, nesting is limited to JSON_MAX_DEPTH. The tree is
 * kept in two growable arrays (nodes and decoded strings) referenced by index. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ztbp_ctl.h"

struct parser {
	const char *s;
	size_t len, pos;
	struct jdoc *doc;
	char *err;
	size_t errlen;
	int failed;
};

static int fail(struct parser *p, const char *what)
{
	size_t line = 1, col = 1, i;

	if (p->failed)
		return -1;
	for (i = 0; i < p->pos && i < p->len; i++) {
		if (p->s[i] == '\n') {
			line++;
			col = 1;
		} else {
			col++;
		}
	}
	snprintf(p->err, p->errlen, "line %zu, column %zu: %s", line, col, what);
	p->failed = 1;
	return -1;
}

static void skip_ws(struct parser *p)
{
	while (p->pos < p->len) {
		char c = p->s[p->pos];
		if (c != ' ' && c != '\t' && c != '\n' && c != '\r')
			break;
		p->pos++;
	}
}

static int new_node(struct parser *p, enum jtype t, size_t *idx)
{
	struct jdoc *d = p->doc;

	if (d->n_nodes == d->cap_nodes) {
		size_t cap = d->cap_nodes ? d->cap_nodes * 2 : 64;
		struct jnode *n = realloc(d->nodes, cap * sizeof *n);
		if (!n)
			return fail(p, "out of memory");
		d->nodes = n;
		d->cap_nodes = cap;
	}
	*idx = d->n_nodes++;
	memset(&d->nodes[*idx], 0, sizeof d->nodes[*idx]);
	d->nodes[*idx].type = t;
	return 0;
}

static int put_byte(struct parser *p, unsigned char c)
{
	struct jdoc *d = p->doc;

	if (d->str_used == d->str_cap) {
		size_t cap = d->str_cap ? d->str_cap * 2 : 256;
		char *s = realloc(d->strings, cap);
		if (!s)
			return fail(p, "out of memory");
		d->strings = s;
		d->str_cap = cap;
	}
	d->strings[d->str_used++] = (char)c;
	return 0;
}

static int put_utf8(struct parser *p, unsigned long cp)
{
	int r = 0;

	if (cp < 0x80) {
		r |= put_byte(p, (unsigned char)cp);
	} else if (cp < 0x800) {
		r |= put_byte(p, (unsigned char)(0xC0 | (cp >> 6)));
		r |= put_byte(p, (unsigned char)(0x80 | (cp & 0x3F)));
	} else if (cp < 0x10000) {
		r |= put_byte(p, (unsigned char)(0xE0 | (cp >> 12)));
		r |= put_byte(p, (unsigned char)(0x80 | ((cp >> 6) & 0x3F)));
		r |= put_byte(p, (unsigned char)(0x80 | (cp & 0x3F)));
	} else {
		r |= put_byte(p, (unsigned char)(0xF0 | (cp >> 18)));
		r |= put_byte(p, (unsigned char)(0x80 | ((cp >> 12) & 0x3F)));
		r |= put_byte(p, (unsigned char)(0x80 | ((cp >> 6) & 0x3F)));
		r |= put_byte(p, (unsigned char)(0x80 | (cp & 0x3F)));
	}
	return r ? -1 : 0;
}

static int hex4(struct parser *p, unsigned long *out)
{
	unsigned long v = 0;
	int i;

	if (p->len - p->pos < 4)
		return fail(p, "truncated \\u escape");
	for (i = 0; i < 4; i++) {
		char c = p->s[p->pos + (size_t)i];
		v <<= 4;
		if (c >= '0' && c <= '9')
			v |= (unsigned long)(c - '0');
		else if (c >= 'a' && c <= 'f')
			v |= (unsigned long)(c - 'a' + 10);
		else if (c >= 'A' && c <= 'F')
			v |= (unsigned long)(c - 'A' + 10);
		else
			return fail(p, "bad hex digit in \\u escape");
	}
	p->pos += 4;
	*out = v;
	return 0;
}

/* Validate one raw UTF-8 sequence starting at p->pos (first byte >= 0x80) and copy it. */
static int utf8_seq(struct parser *p)
{
	const unsigned char *u = (const unsigned char *)p->s + p->pos;
	size_t n = utf8_valid_len(u, p->len - p->pos), i;

	if (n < 2)
		return fail(p, "invalid UTF-8 in string");
	for (i = 0; i < n; i++)
		if (put_byte(p, u[i]))
			return -1;
	p->pos += n;
	return 0;
}

/* Parse a string at p->pos (the opening quote); store its decoded offset and length. */
static int parse_string(struct parser *p, size_t *off, size_t *slen)
{
	size_t start;

	p->pos++; /* opening quote */
	start = p->doc->str_used;
	for (;;) {
		unsigned char c;

		if (p->pos >= p->len)
			return fail(p, "unterminated string");
		c = (unsigned char)p->s[p->pos];
		if (c == '"') {
			p->pos++;
			break;
		}
		if (c < 0x20)
			return fail(p, "raw control character in string (must be escaped)");
		if (c >= 0x80) {
			if (utf8_seq(p))
				return -1;
			continue;
		}
		if (c != '\\') {
			if (put_byte(p, c))
				return -1;
			p->pos++;
			continue;
		}
		p->pos++;
		if (p->pos >= p->len)
			return fail(p, "unterminated escape");
		c = (unsigned char)p->s[p->pos++];
		switch (c) {
		case '"': case '\\': case '/':
			if (put_byte(p, c))
				return -1;
			break;
		case 'b': if (put_byte(p, '\b')) return -1; break;
		case 'f': if (put_byte(p, '\f')) return -1; break;
		case 'n': if (put_byte(p, '\n')) return -1; break;
		case 'r': if (put_byte(p, '\r')) return -1; break;
		case 't': if (put_byte(p, '\t')) return -1; break;
		case 'u': {
			unsigned long cp, lo;
			if (hex4(p, &cp))
				return -1;
			if (cp >= 0xDC00 && cp <= 0xDFFF)
				return fail(p, "unpaired low surrogate in \\u escape");
			if (cp >= 0xD800 && cp <= 0xDBFF) {
				if (p->len - p->pos < 2 || p->s[p->pos] != '\\' || p->s[p->pos + 1] != 'u')
					return fail(p, "unpaired high surrogate in \\u escape");
				p->pos += 2;
				if (hex4(p, &lo))
					return -1;
				if (lo < 0xDC00 || lo > 0xDFFF)
					return fail(p, "high surrogate not followed by a low surrogate");
				cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
			}
			if (put_utf8(p, cp))
				return -1;
			break;
		}
		default:
			p->pos--;
			return fail(p, "invalid escape in string");
		}
	}
	*off = start;
	*slen = p->doc->str_used - start;
	return put_byte(p, '\0');
}

static int parse_number(struct parser *p, size_t idx)
{
	size_t start = p->pos, i;
	int is_int = 1, neg = 0;
	char buf[64], *copy;
	const char *s = p->s;
	struct jnode *n;

	if (p->pos < p->len && s[p->pos] == '-') {
		neg = 1;
		p->pos++;
	}
	if (p->pos >= p->len)
		return fail(p, "truncated number");
	if (s[p->pos] == '0') {
		p->pos++;
		if (p->pos < p->len && s[p->pos] >= '0' && s[p->pos] <= '9')
			return fail(p, "leading zero in number");
	} else if (s[p->pos] >= '1' && s[p->pos] <= '9') {
		while (p->pos < p->len && s[p->pos] >= '0' && s[p->pos] <= '9')
			p->pos++;
	} else {
		return fail(p, "invalid number");
	}
	if (p->pos < p->len && s[p->pos] == '.') {
		is_int = 0;
		p->pos++;
		if (p->pos >= p->len || s[p->pos] < '0' || s[p->pos] > '9')
			return fail(p, "digit expected after decimal point");
		while (p->pos < p->len && s[p->pos] >= '0' && s[p->pos] <= '9')
			p->pos++;
	}
	if (p->pos < p->len && (s[p->pos] == 'e' || s[p->pos] == 'E')) {
		is_int = 0;
		p->pos++;
		if (p->pos < p->len && (s[p->pos] == '+' || s[p->pos] == '-'))
			p->pos++;
		if (p->pos >= p->len || s[p->pos] < '0' || s[p->pos] > '9')
			return fail(p, "digit expected in exponent");
		while (p->pos < p->len && s[p->pos] >= '0' && s[p->pos] <= '9')
			p->pos++;
	}
	n = &p->doc->nodes[idx];
	if (is_int) {
		/* exact integer, with overflow detection (magnitude accumulated as unsigned) */
		uint64_t mag = 0;
		int overflow = 0;
		for (i = start + (size_t)neg; i < p->pos; i++) {
			unsigned d = (unsigned)(s[i] - '0');
			if (mag > (UINT64_MAX - d) / 10)
				overflow = 1;
			else
				mag = mag * 10 + d;
		}
		if (!overflow && (neg ? mag <= (uint64_t)INT64_MAX + 1 : mag <= (uint64_t)INT64_MAX)) {
			n->is_int = 1;
			n->ival = neg ? (mag == (uint64_t)INT64_MAX + 1 ? INT64_MIN : -(int64_t)mag) : (int64_t)mag;
			n->dval = (double)n->ival;
			return 0;
		}
	}
	/* a double (the literal is copied so strtod sees exactly it) */
	i = p->pos - start;
	copy = i < sizeof buf ? buf : malloc(i + 1);
	if (!copy)
		return fail(p, "out of memory");
	memcpy(copy, s + start, i);
	copy[i] = '\0';
	n->dval = strtod(copy, NULL);
	n->is_int = 0;
	if (copy != buf)
		free(copy);
	return 0;
}

static int parse_value(struct parser *p, size_t *out, int depth);

static int expect_word(struct parser *p, const char *w)
{
	size_t n = strlen(w);

	if (p->len - p->pos < n || memcmp(p->s + p->pos, w, n) != 0)
		return fail(p, "invalid literal (expected true, false or null)");
	p->pos += n;
	return 0;
}

static int parse_container(struct parser *p, size_t idx, int depth, int is_object)
{
	size_t last = 0, count = 0;
	char close = is_object ? '}' : ']';

	p->pos++; /* [ or { */
	skip_ws(p);
	if (p->pos < p->len && p->s[p->pos] == close) {
		p->pos++;
		return 0;
	}
	for (;;) {
		size_t child, koff = 0, klen = 0;

		skip_ws(p);
		if (is_object) {
			size_t c;
			if (p->pos >= p->len || p->s[p->pos] != '"')
				return fail(p, "object member name (a string) expected");
			if (parse_string(p, &koff, &klen))
				return -1;
			/* duplicate keys are an error: compare with the earlier members */
			for (c = p->doc->nodes[idx].first_child; c; c = p->doc->nodes[c].next) {
				struct jnode *m = &p->doc->nodes[c];
				if (m->key_len == klen &&
				    memcmp(p->doc->strings + m->key_off, p->doc->strings + koff, klen) == 0)
					return fail(p, "duplicate object key");
			}
			skip_ws(p);
			if (p->pos >= p->len || p->s[p->pos] != ':')
				return fail(p, "':' expected after object member name");
			p->pos++;
		}
		if (parse_value(p, &child, depth + 1))
			return -1;
		if (is_object) {
			/* keys are kept as offsets until the end, see fix_pointers */
			p->doc->nodes[child].key_off = koff;
			p->doc->nodes[child].key_len = klen;
			p->doc->nodes[child].has_key = 1;
		}
		if (count == 0)
			p->doc->nodes[idx].first_child = child;
		else
			p->doc->nodes[last].next = child;
		last = child;
		count++;
		p->doc->nodes[idx].n_children = count;
		skip_ws(p);
		if (p->pos >= p->len)
			return fail(p, is_object ? "unterminated object" : "unterminated array");
		if (p->s[p->pos] == ',') {
			p->pos++;
			skip_ws(p);
			if (p->pos < p->len && p->s[p->pos] == close)
				return fail(p, "trailing comma");
			continue;
		}
		if (p->s[p->pos] == close) {
			p->pos++;
			return 0;
		}
		return fail(p, is_object ? "',' or '}' expected" : "',' or ']' expected");
	}
}

static int parse_value(struct parser *p, size_t *out, int depth)
{
	size_t idx;
	char c;

	if (depth > JSON_MAX_DEPTH)
		return fail(p, "nesting too deep");
	skip_ws(p);
	if (p->pos >= p->len)
		return fail(p, "value expected");
	c = p->s[p->pos];
	switch (c) {
	case '{':
	case '[':
		if (new_node(p, c == '{' ? J_OBJECT : J_ARRAY, &idx))
			return -1;
		if (parse_container(p, idx, depth, c == '{'))
			return -1;
		break;
	case '"': {
		size_t off, len;
		if (new_node(p, J_STRING, &idx))
			return -1;
		if (parse_string(p, &off, &len))
			return -1;
		p->doc->nodes[idx].str_off = off;
		p->doc->nodes[idx].str_len = len;
		break;
	}
	case 't':
		if (new_node(p, J_TRUE, &idx) || expect_word(p, "true"))
			return -1;
		break;
	case 'f':
		if (new_node(p, J_FALSE, &idx) || expect_word(p, "false"))
			return -1;
		break;
	case 'n':
		if (new_node(p, J_NULL, &idx) || expect_word(p, "null"))
			return -1;
		break;
	default:
		if (c == '-' || (c >= '0' && c <= '9')) {
			if (new_node(p, J_NUMBER, &idx) || parse_number(p, idx))
				return -1;
			break;
		}
		return fail(p, "unexpected character (a value was expected)");
	}
	*out = idx;
	return 0;
}

/* While parsing, strings are referenced by offset because the string buffer moves when it grows; turn
 * them into pointers once parsing is done. */
static void fix_pointers(struct jdoc *d)
{
	size_t i;

	for (i = 0; i < d->n_nodes; i++) {
		if (d->nodes[i].has_key)
			d->nodes[i].key = d->strings + d->nodes[i].key_off;
		if (d->nodes[i].type == J_STRING)
			d->nodes[i].str = d->strings + d->nodes[i].str_off;
	}
}

int json_parse(const char *text, size_t len, struct jdoc *doc, char *err, size_t errlen)
{
	struct parser p = {text, len, 0, doc, err, errlen, 0};
	size_t root;

	memset(doc, 0, sizeof *doc);
	if (len >= 3 && (unsigned char)text[0] == 0xEF && (unsigned char)text[1] == 0xBB &&
	    (unsigned char)text[2] == 0xBF)
		return fail(&p, "byte order mark not allowed");
	if (parse_value(&p, &root, 1))
		goto bad;
	skip_ws(&p);
	if (p.pos != p.len) {
		fail(&p, "unexpected content after the JSON value");
		goto bad;
	}
	if (put_byte(&p, '\0')) /* make sure strings is allocated even without strings */
		goto bad;
	fix_pointers(doc);
	return 0;
bad:
	json_free(doc);
	return -1;
}

void json_free(struct jdoc *doc)
{
	free(doc->nodes);
	free(doc->strings);
	memset(doc, 0, sizeof *doc);
}

const struct jnode *json_get(const struct jdoc *doc, const struct jnode *obj, const char *key)
{
	size_t c, klen = strlen(key);

	if (!obj || obj->type != J_OBJECT || obj->n_children == 0)
		return NULL;
	for (c = obj->first_child; c; c = doc->nodes[c].next) {
		const struct jnode *m = &doc->nodes[c];
		if (m->key_len == klen && memcmp(m->key, key, klen) == 0)
			return m;
	}
	return NULL;
}
