/* The file journal's format: each record [u32 length][u32 crc32][JSON
 * bytes], little endian; framing, reading one back, and the writes that
 * put a framed buffer on disk. */
#include "journal_file.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <zlib.h>

static void s_put_u32(unsigned char *p, uint32_t v)
{
    p[0] = (unsigned char) v;
    p[1] = (unsigned char) (v >> 8);
    p[2] = (unsigned char) (v >> 16);
    p[3] = (unsigned char) (v >> 24);
}

static uint32_t s_get_u32(const unsigned char *p)
{
    return (uint32_t) p[0] | (uint32_t) p[1] << 8 | (uint32_t) p[2] << 16
           | (uint32_t) p[3] << 24;
}

static uint32_t s_crc(const void *data, size_t len)
{
    return (uint32_t) crc32(crc32(0L, Z_NULL, 0), data, (uInt) len);
}

long rdzv_journal_frame(const char *json, size_t len, unsigned char *buf, size_t cap)
{
    if (len > RDZV_JOURNAL_MAX_RECORD || len + RDZV_JOURNAL_HEADER > cap)
        return -1;
    s_put_u32(buf, (uint32_t) len);
    s_put_u32(buf + 4, s_crc(json, len));
    memcpy(buf + RDZV_JOURNAL_HEADER, json, len);
    return (long) (len + RDZV_JOURNAL_HEADER);
}

/* Length of the valid record at data[off], 0 if it is damaged. */
size_t rdzv_journal_record_at(const unsigned char *data, size_t len, size_t off)
{
    if (len - off < RDZV_JOURNAL_HEADER)
        return 0;
    uint32_t rlen = s_get_u32(data + off);
    if (rlen == 0 || rlen > RDZV_JOURNAL_MAX_RECORD || rlen > len - off - RDZV_JOURNAL_HEADER)
        return 0;
    if (s_crc(data + off + RDZV_JOURNAL_HEADER, rlen) != s_get_u32(data + off + 4))
        return 0;
    return RDZV_JOURNAL_HEADER + rlen;
}

int rdzv_journal_buf_append(rdzv_journal_buf_t *self, const cJSON *record)
{
    char *json = cJSON_PrintUnformatted(record);
    if (!json)
        return -ENOMEM;
    size_t jlen = strlen(json);
    size_t need = self->len + jlen + RDZV_JOURNAL_HEADER;
    if (need > self->cap) {
        size_t cap = self->cap ? self->cap : 4096;
        while (cap < need)
            cap *= 2;
        char *grown = realloc(self->buf, cap);
        if (!grown) {
            free(json);
            return -ENOMEM;
        }
        self->buf = grown;
        self->cap = cap;
    }
    long framed = rdzv_journal_frame(json, jlen, (unsigned char *) self->buf + self->len,
                                     self->cap - self->len);
    free(json);
    if (framed < 0)
        return -ENOMEM;          /* past RDZV_JOURNAL_MAX_RECORD: no record is near it */
    self->len += (size_t) framed;
    return 0;
}

int rdzv_journal_fsync_dir(const char *dir)
{
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0)
        return -1;
    int rc = fsync(fd);
    close(fd);
    return rc;
}

int rdzv_journal_write_all(int fd, const char *buf, size_t len)
{
    size_t done = 0;
    while (done < len) {
        ssize_t n = write(fd, buf + done, len - done);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            return -1;
        done += (size_t) n;
    }
    return 0;
}

