/*
 * A qconform shim in C (standard library only): the rng_abi and categorical_sampling families.
 *
 * Written from the documents alone: docs/shim-protocol.md (JSON lines on stdin/stdout),
 * docs/rng-abi.md and docs/formats/rng_abi.md (Philox4x32-10, key and counter layout),
 * docs/formats/categorical_sampling.md (the R08 proposal rule over a dyadic24 q row), and
 * docs/vector-format.md (word32, u64 and blob encodings). It carries its own Philox, its
 * own base64 decoder and a JSON reader just large enough for the protocol.
 *
 *   cc -std=c99 -O2 -Wall -Wextra -o qconform_shim qconform_shim.c
 *   qconform run --adapter shim:$PWD/qconform_shim --family rng_abi --family categorical_sampling
 */
#include <errno.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define M24 (1u << 24)

/* ---- a small JSON reader: a tree of values ------------------------------------------------ */

typedef enum { J_NULL, J_BOOL, J_NUM, J_STR, J_ARR, J_OBJ } jtype;

typedef struct jval {
    jtype type;
    char *text;          /* J_STR: the decoded string; J_NUM: the literal */
    int boolean;
    size_t count;        /* J_ARR, J_OBJ: members */
    char **keys;         /* J_OBJ */
    struct jval **items; /* J_ARR, J_OBJ */
} jval;

typedef struct { const char *p; const char *error; } reader;

static void *xmalloc(size_t n) {
    void *p = malloc(n ? n : 1);
    if (!p) { fprintf(stderr, "out of memory\n"); exit(2); }
    return p;
}

static void *xrealloc(void *old, size_t n) {
    void *p = realloc(old, n ? n : 1);
    if (!p) { fprintf(stderr, "out of memory\n"); exit(2); }
    return p;
}

static void jfree(jval *v) {
    size_t i;
    if (!v) return;
    for (i = 0; i < v->count; i++) {
        jfree(v->items[i]);
        if (v->keys) free(v->keys[i]);
    }
    free(v->items); free(v->keys); free(v->text); free(v);
}

static void skip_ws(reader *r) { while (*r->p == ' ' || *r->p == '\t' || *r->p == '\n' || *r->p == '\r') r->p++; }

static jval *parse_value(reader *r);

static int hex4(reader *r, unsigned *code) {
    int k;
    *code = 0;
    for (k = 0; k < 4; k++) {
        char h = *r->p;
        unsigned d;
        if (h >= '0' && h <= '9') d = (unsigned)(h - '0');
        else if (h >= 'a' && h <= 'f') d = (unsigned)(h - 'a' + 10);
        else if (h >= 'A' && h <= 'F') d = (unsigned)(h - 'A' + 10);
        else return 0;
        *code = *code * 16 + d;
        r->p++;
    }
    return 1;
}

static char *parse_string(reader *r) {
    /* JSON strings: the escapes, \uXXXX (surrogate pairs too) written out as UTF-8 */
    size_t cap = 16, n = 0;
    char *out = xmalloc(cap);
    r->p++; /* opening quote */
    while (*r->p && *r->p != '"') {
        char bytes[4];
        int len = 1;
        char c = *r->p++;
        bytes[0] = c;
        if (c == '\\') {
            char e = *r->p++;
            switch (e) {
            case '"': case '\\': case '/': bytes[0] = e; break;
            case 'n': bytes[0] = '\n'; break;
            case 't': bytes[0] = '\t'; break;
            case 'r': bytes[0] = '\r'; break;
            case 'b': bytes[0] = '\b'; break;
            case 'f': bytes[0] = '\f'; break;
            case 'u': {
                unsigned code, low;
                if (!hex4(r, &code)) { r->error = "bad unicode escape"; free(out); return NULL; }
                if (code >= 0xD800 && code < 0xDC00) {
                    if (r->p[0] != '\\' || r->p[1] != 'u') { r->error = "lone surrogate"; free(out); return NULL; }
                    r->p += 2;
                    if (!hex4(r, &low) || low < 0xDC00 || low >= 0xE000) { r->error = "bad surrogate pair"; free(out); return NULL; }
                    code = 0x10000 + ((code - 0xD800) << 10) + (low - 0xDC00);
                }
                if (code < 0x80) { bytes[0] = (char)code; }
                else if (code < 0x800) { bytes[0] = (char)(0xC0 | (code >> 6)); bytes[1] = (char)(0x80 | (code & 0x3F)); len = 2; }
                else if (code < 0x10000) {
                    bytes[0] = (char)(0xE0 | (code >> 12)); bytes[1] = (char)(0x80 | ((code >> 6) & 0x3F));
                    bytes[2] = (char)(0x80 | (code & 0x3F)); len = 3;
                } else {
                    bytes[0] = (char)(0xF0 | (code >> 18)); bytes[1] = (char)(0x80 | ((code >> 12) & 0x3F));
                    bytes[2] = (char)(0x80 | ((code >> 6) & 0x3F)); bytes[3] = (char)(0x80 | (code & 0x3F)); len = 4;
                }
                break;
            }
            default: r->error = "bad escape"; free(out); return NULL;
            }
        }
        while (n + (size_t)len + 1 >= cap) out = xrealloc(out, cap *= 2);
        memcpy(out + n, bytes, (size_t)len);
        n += (size_t)len;
    }
    if (*r->p != '"') { r->error = "unterminated string"; free(out); return NULL; }
    r->p++;
    out[n] = '\0';
    return out;
}

static jval *new_value(jtype type) {
    jval *v = xmalloc(sizeof *v);
    memset(v, 0, sizeof *v);
    v->type = type;
    return v;
}

static void add_member(jval *v, char *key, jval *item) {
    v->items = xrealloc(v->items, (v->count + 1) * sizeof *v->items);
    if (v->type == J_OBJ) v->keys = xrealloc(v->keys, (v->count + 1) * sizeof *v->keys);
    if (v->keys) v->keys[v->count] = key;
    v->items[v->count++] = item;
}

static jval *parse_container(reader *r, jtype type) {
    char close = type == J_ARR ? ']' : '}';
    jval *v = new_value(type);
    r->p++;
    skip_ws(r);
    if (*r->p == close) { r->p++; return v; }
    for (;;) {
        char *key = NULL;
        jval *item;
        skip_ws(r);
        if (type == J_OBJ) {
            if (*r->p != '"' || !(key = parse_string(r))) { r->error = r->error ? r->error : "bad key"; jfree(v); return NULL; }
            skip_ws(r);
            if (*r->p++ != ':') { r->error = "missing ':'"; free(key); jfree(v); return NULL; }
        }
        item = parse_value(r);
        if (!item) { free(key); jfree(v); return NULL; }
        add_member(v, key, item);
        skip_ws(r);
        if (*r->p == ',') { r->p++; continue; }
        if (*r->p == close) { r->p++; return v; }
        r->error = "expected ',' or a closing bracket";
        jfree(v);
        return NULL;
    }
}

static jval *parse_value(reader *r) {
    jval *v;
    skip_ws(r);
    switch (*r->p) {
    case '{': return parse_container(r, J_OBJ);
    case '[': return parse_container(r, J_ARR);
    case '"': {
        char *s = parse_string(r);
        if (!s) return NULL;
        v = new_value(J_STR);
        v->text = s;
        return v;
    }
    case 't': case 'f': case 'n': {
        const char *words[] = {"true", "false", "null"};
        int k;
        for (k = 0; k < 3; k++) {
            size_t len = strlen(words[k]);
            if (strncmp(r->p, words[k], len) == 0) {
                r->p += len;
                v = new_value(k == 2 ? J_NULL : J_BOOL);
                v->boolean = k == 0;
                return v;
            }
        }
        r->error = "bad literal";
        return NULL;
    }
    default: {
        const char *start = r->p;
        while (*r->p == '-' || *r->p == '+' || *r->p == '.' || *r->p == 'e' || *r->p == 'E' ||
               (*r->p >= '0' && *r->p <= '9'))
            r->p++;
        if (r->p == start) { r->error = "unexpected character"; return NULL; }
        v = new_value(J_NUM);
        v->text = xmalloc((size_t)(r->p - start) + 1);
        memcpy(v->text, start, (size_t)(r->p - start));
        v->text[r->p - start] = '\0';
        return v;
    }
    }
}

static jval *get(const jval *obj, const char *key) {
    size_t i;
    if (!obj || obj->type != J_OBJ) return NULL;
    for (i = 0; i < obj->count; i++)
        if (strcmp(obj->keys[i], key) == 0) return obj->items[i];
    return NULL;
}

/* ---- output: a growing buffer ------------------------------------------------------------- */

typedef struct { char *data; size_t len, cap; } buffer;

static void put(buffer *b, const char *fmt, ...) {
    va_list args;
    int need;
    va_start(args, fmt);
    need = vsnprintf(NULL, 0, fmt, args);
    va_end(args);
    if (b->len + (size_t)need + 1 > b->cap) {
        b->cap = (b->len + (size_t)need + 1) * 2;
        b->data = xrealloc(b->data, b->cap);
    }
    va_start(args, fmt);
    vsnprintf(b->data + b->len, (size_t)need + 1, fmt, args);
    va_end(args);
    b->len += (size_t)need;
}

/* ---- refusals: a case's answer {"error": CODE} --------------------------------------------- */

/* all NULL: answered; `unimplemented`: this input needs what the shim does not do (BoGo's 89) */
typedef struct { const char *refusal; const char *error; const char *unimplemented; } outcome;

/* An integer field in [0, limit): the JSON number must be a plain nonnegative integer. */
static int field(const jval *v, uint64_t limit, uint64_t *out) {
    char *end;
    unsigned long long value;
    if (!v || v->type != J_NUM || v->text[0] == '-' || strpbrk(v->text, ".eE+")) return 0;
    errno = 0;
    value = strtoull(v->text, &end, 10);
    if (errno || *end || value >= limit) return 0;
    *out = value;
    return 1;
}

static int u64_string(const jval *v, uint64_t *out) {
    char *end;
    unsigned long long value;
    if (!v || v->type != J_STR || v->text[0] < '0' || v->text[0] > '9') return 0;
    errno = 0;
    value = strtoull(v->text, &end, 10);
    if (errno || *end) return 0;
    *out = value;
    return 1;
}

static int word32(const jval *v, uint32_t *out) {
    char *end;
    unsigned long value;
    if (!v || v->type != J_STR || strncmp(v->text, "0x", 2) != 0 || strlen(v->text) != 10) return 0;
    value = strtoul(v->text + 2, &end, 16);
    if (*end) return 0;
    *out = (uint32_t)value;
    return 1;
}

/* ---- Philox4x32-10 (Random123) and the RNG ABI ---------------------------------------------- */

static void philox4x32(const uint32_t counter[4], const uint32_t key[2], unsigned rounds, uint32_t out[4]) {
    uint32_t c0 = counter[0], c1 = counter[1], c2 = counter[2], c3 = counter[3], k0 = key[0], k1 = key[1];
    unsigned i;
    for (i = 0; i < rounds; i++) {
        uint64_t p0, p1;
        uint32_t n0, n1, n2, n3;
        if (i) { k0 += 0x9E3779B9u; k1 += 0xBB67AE85u; }
        p0 = (uint64_t)0xD2511F53u * c0;
        p1 = (uint64_t)0xCD9E8D57u * c2;
        n0 = (uint32_t)(p1 >> 32) ^ c1 ^ k0;
        n1 = (uint32_t)p1;
        n2 = (uint32_t)(p0 >> 32) ^ c3 ^ k1;
        n3 = (uint32_t)p0;
        c0 = n0; c1 = n1; c2 = n2; c3 = n3;
    }
    out[0] = c0; out[1] = c1; out[2] = c2; out[3] = c3;
}

enum { PROPOSAL = 1, ACCEPT = 2, CORRECTION = 3 };

/* docs/rng-abi.md: key = (seed low, seed high); counter = (position, round, generation, domain << 24 | n) */
static void draw(uint64_t seed, uint32_t generation, uint32_t round_id, uint32_t position, unsigned domain,
                 uint32_t draw_counter, uint32_t key[2], uint32_t counter[4], uint32_t out[4]) {
    key[0] = (uint32_t)seed;
    key[1] = (uint32_t)(seed >> 32);
    counter[0] = position;
    counter[1] = round_id;
    counter[2] = generation;
    counter[3] = (uint32_t)domain << 24 | draw_counter;
    philox4x32(counter, key, 10, out);
}

static void put_words(buffer *b, const uint32_t *words, int n) {
    int i;
    put(b, "[");
    for (i = 0; i < n; i++) put(b, "%s\"0x%08lx\"", i ? "," : "", (unsigned long)words[i]);
    put(b, "]");
}

static void put_schedule(buffer *b, const char *name, uint64_t seed, uint32_t generation, uint32_t round_id,
                         uint32_t anchor, uint64_t count, unsigned domain, int top24) {
    uint64_t i;
    put(b, "\"%s\":[", name);
    for (i = 0; i < count; i++) {
        uint32_t key[2], counter[4], out[4], position = (uint32_t)(anchor + i); /* mod 2^32 */
        draw(seed, generation, round_id, position, domain, 0, key, counter, out);
        put(b, "%s{\"position\":%lu,\"counter\":", i ? "," : "", (unsigned long)position);
        put_words(b, counter, 4);
        put(b, ",\"value\":%lu}", (unsigned long)(top24 ? out[0] >> 8 : out[0]));
    }
    put(b, "]");
}

static outcome rng_abi(const jval *c, buffer *b) {
    outcome result = {NULL, NULL, NULL};
    uint64_t seed, generation, round_id, position, draw_counter, anchor, depth;
    uint32_t key[2], counter[4], out[4];
    if (get(c, "request_id")) { /* the seed of an unseeded request needs SHA-256, which this example leaves out */
        result.unimplemented = "the unseeded-request seed (SHA-256 of the request ID) is not implemented";
        return result;
    }
    if (get(c, "counter")) { /* a known-answer line */
        int i;
        uint64_t rounds;
        const jval *cv = get(c, "counter"), *kv = get(c, "key");
        if (!cv || cv->type != J_ARR || cv->count != 4 || !kv || kv->type != J_ARR || kv->count != 2 ||
            !field(get(c, "rounds"), 64, &rounds)) { result.error = "malformed known-answer input"; return result; }
        for (i = 0; i < 4; i++) if (!word32(cv->items[i], &counter[i])) { result.error = "bad counter word"; return result; }
        for (i = 0; i < 2; i++) if (!word32(kv->items[i], &key[i])) { result.error = "bad key word"; return result; }
        philox4x32(counter, key, (unsigned)rounds, out);
        put(b, "{\"output\":");
        put_words(b, out, 4);
        put(b, "}");
        return result;
    }
    if (!u64_string(get(c, "seed"), &seed) || !field(get(c, "generation"), 1ull << 32, &generation) ||
        !field(get(c, "round"), 1ull << 32, &round_id)) { result.refusal = "BAD_RNG_FIELD"; return result; }
    if (get(c, "anchor")) { /* every draw of one round */
        if (!field(get(c, "anchor"), 1ull << 32, &anchor)) { result.refusal = "BAD_RNG_FIELD"; return result; }
        if (!field(get(c, "depth"), 1ull << 32, &depth) || depth < 1) { result.error = "bad depth"; return result; }
        put(b, "{");
        put_schedule(b, "proposal", seed, (uint32_t)generation, (uint32_t)round_id, (uint32_t)anchor, depth, PROPOSAL, 1);
        put(b, ",");
        put_schedule(b, "accept", seed, (uint32_t)generation, (uint32_t)round_id, (uint32_t)anchor, depth, ACCEPT, 0);
        put(b, ",");
        put_schedule(b, "correction", seed, (uint32_t)generation, (uint32_t)round_id, (uint32_t)anchor, depth + 1,
                     CORRECTION, 0);
        put(b, "}");
        return result;
    }
    {
        const jval *dv = get(c, "domain");
        unsigned domain = 0;
        if (dv && dv->type == J_STR)
            domain = strcmp(dv->text, "PROPOSAL") == 0 ? PROPOSAL : strcmp(dv->text, "ACCEPT") == 0 ? ACCEPT
                   : strcmp(dv->text, "CORRECTION") == 0 ? CORRECTION : 0;
        if (!domain || !field(get(c, "position"), 1ull << 32, &position) ||
            !field(get(c, "draw_counter"), 1ull << 24, &draw_counter)) { result.refusal = "BAD_RNG_FIELD"; return result; }
        draw(seed, (uint32_t)generation, (uint32_t)round_id, (uint32_t)position, domain, (uint32_t)draw_counter,
             key, counter, out);
    }
    put(b, "{\"key\":");
    put_words(b, key, 2);
    put(b, ",\"counter\":");
    put_words(b, counter, 4);
    put(b, ",\"output\":");
    put_words(b, out, 4);
    put(b, ",\"u24\":%lu,\"u32\":%lu}", (unsigned long)(out[0] >> 8), (unsigned long)out[0]);
    return result;
}

/* ---- blobs and categorical sampling (R08) ------------------------------------------------- */

static int b64_value(char c) {
    if (c >= 'A' && c <= 'Z') return c - 'A';
    if (c >= 'a' && c <= 'z') return c - 'a' + 26;
    if (c >= '0' && c <= '9') return c - '0' + 52;
    if (c == '+') return 62;
    if (c == '/') return 63;
    return -1;
}

/* A blob of 4-byte little-endian words (dtype u32 or i32): a malloc'd array and its length. */
static int blob_words(const jval *blob, const char *dtype, uint32_t **words, size_t *count) {
    const jval *d = get(blob, "dtype"), *data = get(blob, "b64");
    size_t len, i, n = 0;
    unsigned char *bytes;
    uint32_t acc = 0;
    int bits = 0;
    if (!d || d->type != J_STR || strcmp(d->text, dtype) != 0 || !data || data->type != J_STR) return 0;
    len = strlen(data->text);
    bytes = xmalloc(len);
    for (i = 0; i < len && data->text[i] != '='; i++) {
        int v = b64_value(data->text[i]);
        if (v < 0) { free(bytes); return 0; }
        acc = acc << 6 | (uint32_t)v;
        bits += 6;
        if (bits >= 8) { bits -= 8; bytes[n++] = (unsigned char)(acc >> bits); }
    }
    if (n % 4) { free(bytes); return 0; }
    *count = n / 4;
    *words = xmalloc(*count * sizeof **words);
    for (i = 0; i < *count; i++)
        (*words)[i] = (uint32_t)bytes[4 * i] | (uint32_t)bytes[4 * i + 1] << 8 | (uint32_t)bytes[4 * i + 2] << 16 |
                      (uint32_t)bytes[4 * i + 3] << 24;
    free(bytes);
    return 1;
}

static outcome categorical_sampling(const jval *c, buffer *b) {
    outcome result = {NULL, NULL, NULL};
    const jval *row = get(c, "row"), *rep = get(row, "representation"), *draws = get(c, "draws");
    uint32_t *counts = NULL, *ids = NULL;
    size_t n = 0, n_ids = 0, i;
    uint64_t vocab, total = 0, *cumulative = NULL;
    int sparse;
    if (!field(get(c, "vocab"), 1ull << 31, &vocab) || !rep || rep->type != J_STR || !draws || draws->type != J_ARR ||
        !blob_words(get(row, "counts"), "u32", &counts, &n)) { result.error = "malformed input"; return result; }
    sparse = strcmp(rep->text, "sparse") == 0;
    if (sparse && !blob_words(get(row, "ids"), "i32", &ids, &n_ids)) { result.error = "malformed ids"; goto done; }
    if (sparse ? n_ids != n : n != vocab) { result.refusal = "BAD_SHAPE"; goto done; }
    if (sparse) { /* R19, each class over the whole row: every ID in range, then strictly ascending, every count positive */
        for (i = 0; i < n; i++) {
            int64_t token = (int32_t)ids[i];
            if (token < 0 || (uint64_t)token >= vocab) { result.refusal = "TOKEN_OUT_OF_RANGE"; goto done; }
        }
        for (i = 0; i < n; i++) {
            if ((i > 0 && (int32_t)ids[i] <= (int32_t)ids[i - 1]) || counts[i] == 0) { result.refusal = "BAD_SPARSE_SUPPORT"; goto done; }
        }
    }
    cumulative = xmalloc(n * sizeof *cumulative);
    for (i = 0; i < n; i++) cumulative[i] = total += counts[i];
    if (total != M24) { result.refusal = "WRONG_TOTAL_MASS"; goto done; }
    put(b, "{\"tokens\":[");
    for (i = 0; i < draws->count; i++) {
        uint64_t u;
        size_t lo = 0, hi = n;
        if (!field(draws->items[i], M24, &u)) { result.error = "a draw is not an integer in [0, 2^24)"; goto done; }
        while (lo < hi) { /* the first entry whose cumulative count is strictly greater than u */
            size_t mid = lo + (hi - lo) / 2;
            if (cumulative[mid] > u) hi = mid; else lo = mid + 1;
        }
        put(b, "%s%lu", i ? "," : "", (unsigned long)(sparse ? ids[lo] : lo));
    }
    put(b, "]}");
done:
    free(counts); free(ids); free(cumulative);
    return result;
}

/* ---- the protocol --------------------------------------------------------------------------- */

static void answer_run(const jval *request, const char *id, buffer *out) {
    const jval *family = get(request, "family"), *inputs = get(request, "inputs");
    outcome (*solve)(const jval *, buffer *) = NULL;
    size_t i;
    if (family && family->type == J_STR && strcmp(family->text, "rng_abi") == 0) solve = rng_abi;
    if (family && family->type == J_STR && strcmp(family->text, "categorical_sampling") == 0) solve = categorical_sampling;
    if (!solve) {
        put(out, "{\"id\":%s,\"status\":\"unimplemented\",\"reason\":\"family not implemented\"}", id);
        return;
    }
    if (!inputs || inputs->type != J_ARR) {
        put(out, "{\"id\":%s,\"status\":\"error\",\"message\":\"inputs is not a list\"}", id);
        return;
    }
    put(out, "{\"id\":%s,\"status\":\"ok\",\"outputs\":[", id);
    for (i = 0; i < inputs->count; i++) {
        buffer answer = {NULL, 0, 0};
        outcome result = solve(inputs->items[i], &answer);
        if (i) put(out, ",");
        if (result.unimplemented)
            put(out, "{\"status\":\"unimplemented\",\"reason\":\"%s\"}", result.unimplemented);
        else if (result.error)
            put(out, "{\"status\":\"error\",\"message\":\"%s\"}", result.error);
        else if (result.refusal)
            put(out, "{\"status\":\"ok\",\"output\":{\"error\":\"%s\"}}", result.refusal);
        else
            put(out, "{\"status\":\"ok\",\"output\":%s}", answer.data);
        free(answer.data);
    }
    put(out, "]}");
}

/* One line of stdin, any length; NULL at end of input. */
static char *read_line(void) {
    size_t cap = 4096, n = 0;
    char *line = xmalloc(cap);
    int c;
    while ((c = getchar()) != EOF && c != '\n') {
        if (n + 1 >= cap) line = xrealloc(line, cap *= 2);
        line[n++] = (char)c;
    }
    if (c == EOF && n == 0) { free(line); return NULL; }
    line[n] = '\0';
    return line;
}

int main(void) {
    char *line;
    while ((line = read_line()) != NULL) {
        reader r = {line, NULL};
        jval *request = parse_value(&r);
        const jval *op = get(request, "op"), *idv = get(request, "id");
        const char *id = idv && idv->type == J_NUM ? idv->text : "null";
        buffer out = {NULL, 0, 0};
        int stop = 0;
        if (!request) {
            put(&out, "{\"id\":null,\"status\":\"error\",\"message\":\"bad request: %s\"}", r.error ? r.error : "?");
        } else if (op && op->type == J_STR && strcmp(op->text, "get_config") == 0) {
            put(&out, "{\"id\":%s,\"status\":\"ok\",\"config\":{\"name\":\"c-shim\",\"protocol\":1,"
                      "\"capabilities\":{\"families\":[\"rng_abi\",\"categorical_sampling\"],\"injected_draws\":true,"
                      "\"devices\":[\"cpu\"]},\"precision\":{},\"device\":\"cpu\"}}", id);
        } else if (op && op->type == J_STR && strcmp(op->text, "run") == 0) {
            answer_run(request, id, &out);
        } else if (op && op->type == J_STR && strcmp(op->text, "shutdown") == 0) {
            put(&out, "{\"id\":%s,\"status\":\"ok\"}", id);
            stop = 1;
        } else {
            put(&out, "{\"id\":%s,\"status\":\"error\",\"message\":\"unknown op\"}", id);
        }
        fputs(out.data, stdout);
        fputc('\n', stdout);
        fflush(stdout);
        free(out.data);
        jfree(request);
        free(line);
        if (stop) break;
    }
    return 0;
}
