/* The tuning cache file (COMMGEMM_TUNE_CACHE): one decision per line
 * under a header naming the format, library and device. Lines that do not
 * parse are skipped with one warning; new decisions are appended with one
 * O_APPEND write each, so that concurrent writers never interleave a line. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

#include "tune/tune_internal.h"

#define HEADER_PREFIX "# commgemm tune cache v"

static void library_version(char *buf, size_t len) {
    snprintf(buf, len, "%d.%d.%d", COMMGEMM_VERSION_MAJOR,
             COMMGEMM_VERSION_MINOR, COMMGEMM_VERSION_PATCH);
}

/* ---- names <-> values, without touching the thread's error detail ---- */

static bool name_index(const char *text, const char *(*name)(int), int count,
                       int *out) {
    for (int i = 0; i < count; i++)
        if (!strcasecmp(text, name(i))) {
            *out = i;
            return true;
        }
    return false;
}

static const char *op_name(int v) { return cgm_op_name((cgm_op)v); }
static const char *backend_name(int v) {
    return cgm_backend_name((cgm_backend)v);
}
static const char *dtype_name(int v) { return cgm_dtype_name((cgm_dtype)v); }
static const char *layout_name(int v) {
    return cgm_layout_name((cgm_layout)v);
}
static const char *algo_name(int v) { return cgm_algo_name((cgm_algo)v); }
static const char *epilogue_name(int v) {
    return cgm_epilogue_name((cgm_epilogue)v);
}

static bool parse_int(const char *text, int64_t min, int64_t *out) {
    char *end = NULL;
    errno = 0;
    long long v = strtoll(text, &end, 10);
    if (errno || end == text || *end || v < min) return false;
    *out = v;
    return true;
}

/* epilogue= only where the key has one: a file's lines without it are
 * the calls without an epilogue, as before epilogues existed. */
int tune_disk_format_line(const tune_key *k, cgm_tune_candidate c, double us,
                          char *buf, size_t len) {
    int e = (int)k->w[TUNE_KEY_EPILOGUE];
    return snprintf(buf, len,
                    "op=%s backend=%s in=%s out=%s layout=%s P=%lld m=%lld "
                    "k=%lld n=%lld bias=%lld partial=%s%s%s algo=%s splits=%d "
                    "queues=%d us=%.1f\n",
                    op_name((int)k->w[TUNE_KEY_OP]),
                    backend_name((int)k->w[TUNE_KEY_BACKEND]),
                    dtype_name((int)k->w[TUNE_KEY_IN]),
                    dtype_name((int)k->w[TUNE_KEY_OUT]),
                    layout_name((int)k->w[TUNE_KEY_LAYOUT]),
                    (long long)k->w[TUNE_KEY_P], (long long)k->w[TUNE_KEY_M],
                    (long long)k->w[TUNE_KEY_K], (long long)k->w[TUNE_KEY_N],
                    (long long)k->w[TUNE_KEY_BIAS],
                    dtype_name((int)k->w[TUNE_KEY_PARTIAL]), e ? " epilogue=" : "",
                    e ? epilogue_name(e) : "", algo_name(c.algo),
                    c.splits, c.queues, us);
}

bool tune_disk_parse_line(const char *line, tune_disk_entry *out) {
    static const char *keys[] = {"op",     "backend", "in", "out",
                                 "layout", "P",       "m",  "k",
                                 "n",      "bias",    "algo", "splits",
                                 "us",     "queues", "partial", "epilogue"};
    /* queues (the compute queues the choice runs on, 0 = the backend's
     * setting), partial (the partial dtype) and epilogue came after the
     * first files: a line without them reads 0, fp32 and none. */
    enum { NKEYS = 16, REQUIRED = (1u << 13) - 1 };
    char copy[512];
    size_t n = strlen(line);
    if (n >= sizeof copy) return false;
    memcpy(copy, line, n + 1);
    while (n && (copy[n - 1] == '\n' || copy[n - 1] == '\r')) copy[--n] = 0;
    memset(out, 0, sizeof *out);
    unsigned seen = 0;
    char *save = NULL;
    for (char *tok = strtok_r(copy, " \t", &save); tok;
         tok = strtok_r(NULL, " \t", &save)) {
        char *eq = strchr(tok, '=');
        if (!eq) return false;
        *eq = 0;
        const char *v = eq + 1;
        int which = -1;
        for (int i = 0; i < NKEYS; i++)
            if (!strcmp(tok, keys[i])) which = i;
        if (which < 0 || (seen & (1u << which))) return false;
        seen |= 1u << which;
        int idx = 0;
        int64_t num = 0;
        bool ok = true;
        switch (which) {
        case 0:
            ok = name_index(v, op_name, CGM_OP_COUNT_, &idx);
            out->key.w[TUNE_KEY_OP] = idx;
            break;
        case 1:
            ok = name_index(v, backend_name, CGM_BACKEND_COUNT_, &idx);
            out->key.w[TUNE_KEY_BACKEND] = idx;
            break;
        case 2:
        case 3:
            ok = name_index(v, dtype_name, CGM_DTYPE_COUNT_, &idx);
            out->key.w[which == 2 ? TUNE_KEY_IN : TUNE_KEY_OUT] = idx;
            break;
        case 4:
            ok = name_index(v, layout_name, CGM_LAYOUT_COUNT_, &idx);
            out->key.w[TUNE_KEY_LAYOUT] = idx;
            break;
        case 5: ok = parse_int(v, 1, &out->key.w[TUNE_KEY_P]); break;
        case 6: ok = parse_int(v, 0, &out->key.w[TUNE_KEY_M]); break;
        case 7: ok = parse_int(v, 0, &out->key.w[TUNE_KEY_K]); break;
        case 8: ok = parse_int(v, 0, &out->key.w[TUNE_KEY_N]); break;
        case 9:
            ok = parse_int(v, 0, &num) && num <= 1;
            out->key.w[TUNE_KEY_BIAS] = num;
            break;
        case 10:
            ok = name_index(v, algo_name, CGM_ALGO_COUNT_, &idx) &&
                 idx != CGM_ALGO_AUTO;
            out->choice.algo = (cgm_algo)idx;
            break;
        case 11:
            ok = parse_int(v, 1, &num) && num <= 64;
            out->choice.splits = (int)num;
            break;
        case 12: {
            char *end = NULL;
            out->us = strtod(v, &end);
            ok = end != v && !*end && out->us >= 0;
            break;
        }
        case 13:
            ok = parse_int(v, 0, &num) && num <= 8;
            out->choice.queues = (int)num;
            break;
        case 14:
            ok = name_index(v, dtype_name, CGM_DTYPE_COUNT_, &idx);
            out->key.w[TUNE_KEY_PARTIAL] = idx;
            break;
        default:
            ok = name_index(v, epilogue_name, CGM_EPILOGUE_COUNT_, &idx);
            out->key.w[TUNE_KEY_EPILOGUE] = idx;
            break;
        }
        if (!ok) return false;
    }
    return (seen & REQUIRED) == REQUIRED;
}

/* Value of `name=` in a header line, copied into buf; false if absent. */
static bool header_field(const char *line, const char *name, char *buf,
                         size_t len) {
    size_t nl = strlen(name);
    for (const char *p = line; (p = strstr(p, name)) != NULL; p += nl) {
        if (p != line && p[-1] != ' ') continue;
        if (p[nl] != '=') continue;
        const char *v = p + nl + 1;
        size_t n = strcspn(v, " \t\r\n");
        if (n >= len) n = len - 1;
        memcpy(buf, v, n);
        buf[n] = 0;
        return true;
    }
    return false;
}

bool tune_disk_header_matches(const char *line, const char *device) {
    char want[32], lib[32], dev[128];
    if (strncmp(line, HEADER_PREFIX, strlen(HEADER_PREFIX)) != 0) return false;
    if (atoi(line + strlen(HEADER_PREFIX)) != TUNE_CACHE_VERSION) return false;
    library_version(want, sizeof want);
    if (!header_field(line, "library", lib, sizeof lib) || strcmp(lib, want))
        return false;
    return header_field(line, "device", dev, sizeof dev) &&
           !strcmp(dev, device);
}

static bool add_entry(tune_disk *d, const tune_disk_entry *e) {
    if (d->count == d->cap) {
        int cap = d->cap ? d->cap * 2 : 32;
        tune_disk_entry *grown = realloc(d->entries, (size_t)cap * sizeof *grown);
        if (!grown) return false;
        d->entries = grown;
        d->cap = cap;
    }
    d->entries[d->count++] = *e;
    return true;
}

void tune_disk_load(tune_disk *d, const char *path, const char *device) {
    memset(d, 0, sizeof *d);
    snprintf(d->path, sizeof d->path, "%s", path);
    d->loaded = true;
    FILE *f = fopen(path, "r");
    if (!f) {
        if (errno == ENOENT) {
            d->usable = true; /* created on the first append */
            CGM_INFO(CGM_SUB_TUNE, "tune cache %s: not there yet, decisions "
                     "will be appended to it", path);
        } else {
            CGM_WARN(CGM_SUB_TUNE, "tune cache %s: cannot open it (%s); "
                     "tuning without a cache file; fix its permissions or "
                     "point COMMGEMM_TUNE_CACHE elsewhere", path,
                     strerror(errno));
        }
        return;
    }
    char line[1024];
    int lineno = 0, first_bad = 0;
    while (fgets(line, sizeof line, f)) {
        lineno++;
        bool whole = strchr(line, '\n') || feof(f);
        if (!whole) { /* an overlong line: skip the rest of it */
            int ch;
            while ((ch = fgetc(f)) != EOF && ch != '\n') {
            }
        }
        if (lineno == 1) {
            if (!strncmp(line, HEADER_PREFIX, strlen(HEADER_PREFIX))) {
                d->has_header = true;
                if (!tune_disk_header_matches(line, device)) {
                    line[strcspn(line, "\r\n")] = 0;
                    CGM_WARN(CGM_SUB_TUNE, "tune cache %s was written for "
                             "another library version or device (header "
                             "\"%s\"; this is library %d.%d.%d on device "
                             "%s): its decisions are not used and none are "
                             "added; delete the file or point "
                             "COMMGEMM_TUNE_CACHE at a file for this device",
                             path, line, COMMGEMM_VERSION_MAJOR,
                             COMMGEMM_VERSION_MINOR, COMMGEMM_VERSION_PATCH,
                             device);
                    fclose(f);
                    return;
                }
                continue;
            }
        }
        if (line[0] == '#' || line[strspn(line, " \t\r\n")] == 0) continue;
        tune_disk_entry e;
        if (!whole || !tune_disk_parse_line(line, &e)) {
            if (!d->rejected) first_bad = lineno;
            d->rejected++;
            continue;
        }
        if (!add_entry(d, &e)) break;
    }
    fclose(f);
    /* A file with lines but no header is not ours to append to. */
    d->usable = d->has_header || (d->count == 0 && d->rejected == 0);
    if (d->rejected)
        CGM_WARN(CGM_SUB_TUNE, "tune cache %s: ignored %d line%s that do not "
                 "parse (first: line %d); expected lines written by "
                 "commgemm (docs/TUNING.md); those keys are measured again",
                 path, d->rejected, d->rejected == 1 ? "" : "s", first_bad);
    if (!d->has_header && (d->count || d->rejected))
        CGM_WARN(CGM_SUB_TUNE, "tune cache %s has no header line; its "
                 "decisions are used but nothing is appended to it", path);
    CGM_INFO(CGM_SUB_TUNE, "tune cache %s: %d decision%s loaded", path,
             d->count, d->count == 1 ? "" : "s");
}

void tune_disk_free(tune_disk *d) {
    free(d->entries);
    d->entries = NULL;
    d->count = d->cap = 0;
}

const tune_disk_entry *tune_disk_find(const tune_disk *d, const tune_key *key) {
    for (int i = d->count - 1; i >= 0; i--)
        if (!memcmp(&d->entries[i].key, key, sizeof *key)) return &d->entries[i];
    return NULL;
}

static bool write_all(int fd, const char *buf, size_t len) {
    while (len) {
        ssize_t w = write(fd, buf, len);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) return false;
        buf += w;
        len -= (size_t)w;
    }
    return true;
}

/* Creates the file with its header, atomically: written under a temporary
 * name, then link(2)ed into place (fails if another process was first,
 * which is as good). */
static bool create_with_header(const tune_disk *d, const char *device) {
    char tmp[1100], header[512], lib[32], host[64] = "";
    snprintf(tmp, sizeof tmp, "%s.tmp.%d", d->path, (int)getpid());
    library_version(lib, sizeof lib);
    gethostname(host, sizeof host - 1);
    for (char *p = host; *p; p++)
        if (*p == ' ') *p = '_';
    int n = snprintf(header, sizeof header,
                     HEADER_PREFIX "%d library=%s device=%s host=%s\n",
                     TUNE_CACHE_VERSION, lib, device, host[0] ? host : "unknown");
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd < 0) return false;
    bool ok = write_all(fd, header, (size_t)n);
    close(fd);
    if (ok && link(tmp, d->path) != 0 && errno != EEXIST) ok = false;
    unlink(tmp);
    return ok;
}

void tune_disk_append(tune_disk *d, const char *device, const tune_key *key,
                      cgm_tune_candidate choice, double us) {
    if (!d->loaded || !d->usable) return;
    char line[512];
    int n = tune_disk_format_line(key, choice, us, line, sizeof line);
    struct stat sb;
    bool ok = true;
    if (stat(d->path, &sb) != 0 || sb.st_size == 0) {
        if (stat(d->path, &sb) == 0) unlink(d->path); /* empty: re-create */
        ok = create_with_header(d, device);
    }
    int fd = ok ? open(d->path, O_WRONLY | O_APPEND) : -1;
    if (fd >= 0) {
        ok = write_all(fd, line, (size_t)n);
        close(fd);
    } else {
        ok = false;
    }
    if (ok) {
        d->appended++;
    } else if (!d->warned_write) {
        d->warned_write = true;
        CGM_WARN(CGM_SUB_TUNE, "tune cache %s: cannot append to it (%s); "
                 "decisions stay in memory only; fix its directory or "
                 "permissions or point COMMGEMM_TUNE_CACHE elsewhere",
                 d->path, strerror(errno));
    }
}
