#include "log.h"

#include <cjson/cJSON.h>
#include <ctype.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static bool s_json;
static rdzv_log_level_t s_threshold = RDZV_LOG_INFO;
static const char *const s_level_names[] = { "error", "warn", "info", "debug" };

void rdzv_log_set_json(bool json)
{
    s_json = json;
}

void rdzv_log_set_level(rdzv_log_level_t level)
{
    s_threshold = level;
}

int rdzv_log_level_parse(const char *name, rdzv_log_level_t *out)
{
    for (int i = RDZV_LOG_ERROR; i <= RDZV_LOG_DEBUG; i++)
        if (strcmp(name, s_level_names[i]) == 0) {
            *out = (rdzv_log_level_t) i;
            return 0;
        }
    return -1;
}

/* Each event has one level, so a reader filters by either. */
static rdzv_log_level_t s_level_of(const char *event)
{
    if (strcmp(event, "fatal") == 0)
        return RDZV_LOG_ERROR;
    if (strcmp(event, "refuse") == 0 || strcmp(event, "open") == 0 || strcmp(event, "nccl") == 0)
        return RDZV_LOG_WARN;
    if (strcmp(event, "auth") == 0)
        return RDZV_LOG_DEBUG;
    return RDZV_LOG_INFO;
}

static const char *s_level(const char *event)
{
    return s_level_names[s_level_of(event)];
}

bool rdzv_log_enabled(const char *event)
{
    return s_level_of(event) <= s_threshold;
}

static bool s_is_integer(const char *s)
{
    if (*s == '-')
        s++;
    if (!*s || strlen(s) > 15)
        return false;
    for (; *s; s++)
        if (!isdigit((unsigned char) *s))
            return false;
    return true;
}

/* Splits off the next word; a value in double quotes may hold spaces. */
static char *s_next_word(char **cursor)
{
    char *p = *cursor;
    while (*p == ' ')
        p++;
    if (!*p)
        return NULL;
    char *word = p;
    bool quoted = false;
    for (; *p && (quoted || *p != ' '); p++)
        if (*p == '"')
            quoted = !quoted;
    if (*p)
        *p++ = '\0';
    *cursor = p;
    return word;
}

static void s_add_field(cJSON *obj, char *key, char *value)
{
    size_t n = strlen(value);
    if (n >= 2 && value[0] == '"' && value[n - 1] == '"') {
        value[n - 1] = '\0';
        value++;
    } else if (s_is_integer(value)) {
        cJSON_AddNumberToObject(obj, key, (double) strtoll(value, NULL, 10));
        return;
    }
    cJSON_AddStringToObject(obj, key, value);
}

/* A JSON line's object with what every line has. */
static cJSON *s_head(const char *when, const char *event)
{
    cJSON *obj = cJSON_CreateObject();
    cJSON_AddStringToObject(obj, "time", when);
    cJSON_AddStringToObject(obj, "level", s_level(event));
    cJSON_AddStringToObject(obj, "event", event);
    return obj;
}

static char *s_print(cJSON *obj)
{
    char *line = cJSON_PrintUnformatted(obj);
    cJSON_Delete(obj);
    return line;
}

char *rdzv_log_json_line(const char *when, const char *event, const char *text)
{
    cJSON *obj = s_head(when, event);
    char *copy = strdup(text), *cursor = copy, *word;
    char message[1024] = "";
    while (copy && (word = s_next_word(&cursor))) {
        char *eq = strchr(word, '='), *quote = strchr(word, '"');
        if (eq && eq != word && (!quote || quote > eq)) {
            *eq = '\0';
            if (!cJSON_GetObjectItemCaseSensitive(obj, word))
                s_add_field(obj, word, eq + 1);
        } else {
            size_t used = strlen(message);
            snprintf(message + used, sizeof message - used, "%s%s", used ? " " : "", word);
        }
    }
    if (*message)
        cJSON_AddStringToObject(obj, "message", message);
    free(copy);
    return s_print(obj);
}

char *rdzv_log_refuse_json(const char *when, const char *code, const char *group, int rank,
                           const char *message)
{
    cJSON *obj = s_head(when, "refuse");
    cJSON_AddStringToObject(obj, "code", code);
    if (group)
        cJSON_AddStringToObject(obj, "group", group);
    if (rank >= 0)
        cJSON_AddNumberToObject(obj, "rank", rank);
    cJSON_AddStringToObject(obj, "message", message);
    return s_print(obj);
}

static void s_when(char *when, size_t len)
{
    char stamp[32];
    struct timespec ts;
    struct tm tm;
    clock_gettime(CLOCK_REALTIME, &ts);
    gmtime_r(&ts.tv_sec, &tm);
    strftime(stamp, sizeof stamp, "%Y-%m-%dT%H:%M:%S", &tm);
    snprintf(when, len, "%s.%03ldZ", stamp, ts.tv_nsec / 1000000);
}

static void s_put_line(char *line)
{
    if (line)
        fprintf(stderr, "%s\n", line);
    free(line);
}

void rdzv_log_refuse(const char *code, const char *group, int rank, const char *message)
{
    if (!rdzv_log_enabled("refuse"))
        return;
    char when[48];
    s_when(when, sizeof when);
    if (s_json) {
        s_put_line(rdzv_log_refuse_json(when, code, group, rank, message));
        return;
    }
    char about[RDZV_LOG_ABOUT_MAX] = "";
    if (group)
        snprintf(about, sizeof about, " group=%s", group);
    if (rank >= 0)
        snprintf(about + strlen(about), sizeof about - strlen(about), " rank=%d", rank);
    fprintf(stderr, "rdzvd %s refuse code=%s%s %s\n", when, code, about, message);
}

void rdzv_core_log(const char *event, const char *fmt, ...)
{
    if (!rdzv_log_enabled(event))
        return;
    char when[48], text[1024];
    s_when(when, sizeof when);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(text, sizeof text, fmt, ap);
    va_end(ap);
    if (!s_json) {
        fprintf(stderr, "rdzvd %s %s %s\n", when, event, text);
        return;
    }
    s_put_line(rdzv_log_json_line(when, event, text));
}
