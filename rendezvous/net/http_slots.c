#include "http_slots.h"

#include <stdlib.h>

static void s_unlink(rdzv_http_slots_t *self, rdzv_http_slot_t *slot)
{
    if (slot->prev)
        slot->prev->next = slot->next;
    else
        self->head = slot->next;
    if (slot->next)
        slot->next->prev = slot->prev;
    else
        self->tail = slot->prev;
    slot->prev = slot->next = NULL;
}

static void s_append(rdzv_http_slots_t *self, rdzv_http_slot_t *slot)
{
    slot->prev = self->tail;
    slot->next = NULL;
    if (self->tail)
        self->tail->next = slot;
    else
        self->head = slot;
    self->tail = slot;
}

rdzv_http_slot_t *rdzv_http_slots_open(rdzv_http_slots_t *self, void *conn, int64_t now_ms)
{
    rdzv_http_slot_t *slot = calloc(1, sizeof *slot);
    if (!slot)
        return NULL;
    slot->conn = conn;
    slot->since_ms = now_ms;
    s_append(self, slot);
    self->count++;
    return slot;
}

void rdzv_http_slots_close(rdzv_http_slots_t *self, rdzv_http_slot_t *slot)
{
    if (!slot)
        return;
    s_unlink(self, slot);
    if (!slot->evicted)
        self->count--;
    free(slot);
}

void rdzv_http_slots_request(rdzv_http_slots_t *self, rdzv_http_slot_t *slot)
{
    (void) self;
    if (slot)
        slot->in_request = true;
}

void rdzv_http_slots_response(rdzv_http_slots_t *self, rdzv_http_slot_t *slot, int64_t now_ms)
{
    if (!slot)
        return;
    slot->in_request = false;
    slot->since_ms = now_ms;
    s_unlink(self, slot);            /* the newest waiter now: keep the order */
    s_append(self, slot);
}

size_t rdzv_http_slots_evict(rdzv_http_slots_t *self, int64_t now_ms, void **conns, size_t max)
{
    size_t n = 0;
    for (rdzv_http_slot_t *s = self->head; s && n < max; s = s->next) {
        if (s->evicted)
            continue;
        /* A response may take long to read; only a crowd makes it give way,
         * else slow readers would leave a newcomer nobody to evict but itself. */
        bool crowded = self->count > RDZV_HTTP_SLOTS_KEEP;
        bool late = !s->in_request && now_ms - s->since_ms >= RDZV_HTTP_HEADER_DEADLINE_MS;
        if (!crowded && !late) {
            if (s->in_request)
                continue;
            break;                   /* in order: the rest are younger */
        }
        s->evicted = true;
        self->count--;
        conns[n++] = s->conn;
    }
    return n;
}
