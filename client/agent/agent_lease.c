#include "agent_lease.h"
#include "rdzv_proto.h"

#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

typedef struct {
    rdzv_lease_where_t where;
    bool reuseport;
} s_listener_t;

typedef struct {
    int port;
    rdzv_port_state_t state;
    bool port0;                /* leased by a port-0 probe, never a listener's */
    uint64_t leased_at;        /* the lease's sequence number: oldest first */
    int holders;               /* probe sockets of this port still open */
    s_listener_t *listeners;   /* sockets handed over on this port, still open */
    size_t nlisteners;
    size_t cap_listeners;
} s_slot_t;

struct rdzv_lease {
    int range_base;
    int range_limit;
    size_t nslots;
    s_slot_t *slots;         /* the plan, in plan order */
    uint64_t leases;         /* sequence numbers handed out */
};

rdzv_lease_t *rdzv_lease_new(int range_base, int range_limit,
                             const int *plan, size_t nplan)
{
    if (range_base <= 0 || range_limit > 65536 || range_base >= range_limit
        || (nplan > 0 && !plan))
        return NULL;
    for (size_t i = 0; i < nplan; i++)
        if (plan[i] < range_base || plan[i] >= range_limit)
            return NULL;
    rdzv_lease_t *self = calloc(1, sizeof *self);
    if (!self)
        return NULL;
    self->slots = calloc(nplan ? nplan : 1, sizeof *self->slots);
    if (!self->slots) {
        free(self);
        return NULL;
    }
    self->range_base = range_base;
    self->range_limit = range_limit;
    self->nslots = nplan;
    for (size_t i = 0; i < nplan; i++) {
        self->slots[i].port = plan[i];
        self->slots[i].state = RDZV_PORT_FREE;
    }
    return self;
}

void rdzv_lease_destroy(rdzv_lease_t **self_p)
{
    if (!self_p || !*self_p)
        return;
    for (size_t i = 0; i < (*self_p)->nslots; i++)
        free((*self_p)->slots[i].listeners);
    free((*self_p)->slots);
    free(*self_p);
    *self_p = NULL;
}

int rdzv_lease_range_base(const rdzv_lease_t *self)
{
    return self->range_base;
}

int rdzv_lease_range_limit(const rdzv_lease_t *self)
{
    return self->range_limit;
}

bool rdzv_lease_plan_span(const rdzv_lease_t *self, int *first, int *limit)
{
    *first = *limit = 0;
    for (size_t i = 0; i < self->nslots; i++) {
        int p = self->slots[i].port;
        *first = !*first || p < *first ? p : *first;
        *limit = p + 1 > *limit ? p + 1 : *limit;
    }
    return self->nslots > 0;
}

static s_slot_t *s_slot(const rdzv_lease_t *self, int port)
{
    for (size_t i = 0; i < self->nslots; i++)
        if (self->slots[i].port == port)
            return &self->slots[i];
    return NULL;
}

static bool s_in_range(const rdzv_lease_t *self, int port)
{
    return port >= self->range_base && port < self->range_limit;
}

rdzv_port_state_t rdzv_lease_state(const rdzv_lease_t *self, int port)
{
    if (!s_in_range(self, port))
        return RDZV_PORT_OUTSIDE;
    s_slot_t *slot = s_slot(self, port);
    return slot ? slot->state : RDZV_PORT_FOREIGN;
}

int rdzv_lease_probe(rdzv_lease_t *self, int port)
{
    if (!s_in_range(self, port))
        return EINVAL;
    s_slot_t *slot = s_slot(self, port);
    if (!slot || slot->state != RDZV_PORT_FREE)
        return EADDRINUSE;
    slot->state = RDZV_PORT_LEASED;
    slot->port0 = false;
    return 0;
}

void rdzv_lease_unprobe(rdzv_lease_t *self, int port)
{
    s_slot_t *slot = s_slot(self, port);
    if (slot && slot->state == RDZV_PORT_LEASED)
        slot->state = RDZV_PORT_FREE;
}

/* A port-0 lease nobody holds any more, and that no listener took. */
static bool s_idle_port0(const s_slot_t *s)
{
    return s->state == RDZV_PORT_LEASED && s->port0 && s->holders == 0;
}

size_t rdzv_lease_port0_slot(size_t n, size_t k)
{
    size_t pool = (size_t) rdzv_probe_offset((int) n);
    if (pool > n)
        pool = n;
    return k < n - pool ? pool + k : n - 1 - k;
}

int rdzv_lease_probe_any(rdzv_lease_t *self, int *port_out)
{
    s_slot_t *pick = NULL;
    for (size_t k = 0; k < self->nslots && !pick; k++) {
        s_slot_t *s = &self->slots[rdzv_lease_port0_slot(self->nslots, k)];
        if (s->state == RDZV_PORT_FREE)
            pick = s;
    }
    for (size_t i = 0; i < self->nslots && (!pick || pick->state != RDZV_PORT_FREE); i++) {
        s_slot_t *s = &self->slots[i];
        if (s_idle_port0(s) && (!pick || s->leased_at < pick->leased_at))
            pick = s;
    }
    if (!pick)
        return EADDRINUSE;
    pick->state = RDZV_PORT_LEASED;
    pick->port0 = true;
    pick->leased_at = ++self->leases;
    *port_out = pick->port;
    return 0;
}

void rdzv_lease_hold(rdzv_lease_t *self, int port, int delta)
{
    s_slot_t *slot = s_slot(self, port);
    if (slot && slot->holders + delta >= 0)
        slot->holders += delta;
}

static bool s_wildcard(const rdzv_lease_where_t *w)
{
    static const unsigned char zero[16];
    return memcmp(w->addr, zero, w->family == AF_INET ? 4 : 16) == 0;
}

static bool s_same_where(const rdzv_lease_where_t *a, const rdzv_lease_where_t *b)
{
    return a->family == b->family && a->v6only == b->v6only
        && memcmp(a->addr, b->addr, a->family == AF_INET ? 4 : 16) == 0;
}

/* Whether two binds on one port would collide without SO_REUSEPORT
 * (Linux's inet_rcv_saddr_equal). */
static bool s_overlap(const rdzv_lease_where_t *a, const rdzv_lease_where_t *b)
{
    if (a->family == b->family)
        return s_wildcard(a) || s_wildcard(b)
            || memcmp(a->addr, b->addr, a->family == AF_INET ? 4 : 16) == 0;
    const rdzv_lease_where_t *v6 = a->family == AF_INET6 ? a : b;
    return s_wildcard(v6) && !v6->v6only;
}

static int s_add_listener(s_slot_t *slot, const rdzv_lease_where_t *where, bool reuseport)
{
    if (slot->nlisteners == slot->cap_listeners) {
        size_t cap = slot->cap_listeners ? 2 * slot->cap_listeners : 4;
        s_listener_t *grown = realloc(slot->listeners, cap * sizeof *grown);
        if (!grown)
            return ENOMEM;
        slot->listeners = grown;
        slot->cap_listeners = cap;
    }
    slot->listeners[slot->nlisteners++] = (s_listener_t) {
        .where = *where, .reuseport = reuseport };
    slot->state = RDZV_PORT_TAKEN;
    slot->port0 = false;         /* its owner binds it: never lease it to another */
    return 0;
}

/* ::ffff:a.b.c.d binds a.b.c.d for the kernel's conflict check. */
static rdzv_lease_where_t s_normal(const rdzv_lease_where_t *w)
{
    static const unsigned char mapped[12] = { [10] = 0xff, [11] = 0xff };
    rdzv_lease_where_t n = *w;
    if (w->family == AF_INET6 && memcmp(w->addr, mapped, sizeof mapped) == 0) {
        memset(&n, 0, sizeof n);
        n.family = AF_INET;
        memcpy(n.addr, &w->addr[12], 4);
    }
    return n;
}

int rdzv_lease_listen_at(rdzv_lease_t *self, int port, const rdzv_lease_where_t *where_in,
                         bool reuseport)
{
    rdzv_lease_where_t n = s_normal(where_in), *where = &n;
    if (!s_in_range(self, port)
        || (where->family != AF_INET && where->family != AF_INET6))
        return EINVAL;
    s_slot_t *slot = s_slot(self, port);
    if (!slot)
        return EADDRINUSE;
    for (size_t i = 0; i < slot->nlisteners; i++) {
        const s_listener_t *l = &slot->listeners[i];
        if (s_overlap(&l->where, where) && !(reuseport && l->reuseport))
            return EADDRINUSE;
    }
    return s_add_listener(slot, where, reuseport);
}

void rdzv_lease_unlisten_at(rdzv_lease_t *self, int port, const rdzv_lease_where_t *where_in)
{
    rdzv_lease_where_t n = s_normal(where_in), *where = &n;
    s_slot_t *slot = s_slot(self, port);
    if (!slot || slot->state != RDZV_PORT_TAKEN)
        return;
    for (size_t i = 0; i < slot->nlisteners; i++) {
        if (s_same_where(&slot->listeners[i].where, where)) {
            slot->listeners[i] = slot->listeners[--slot->nlisteners];
            break;
        }
    }
    if (slot->nlisteners == 0)
        slot->state = RDZV_PORT_LEASED;
}

void rdzv_lease_reset(rdzv_lease_t *self)
{
    for (size_t i = 0; i < self->nslots; i++) {
        self->slots[i].state = RDZV_PORT_FREE;
        self->slots[i].nlisteners = 0;
        self->slots[i].port0 = false;
        self->slots[i].holders = 0;
    }
}
