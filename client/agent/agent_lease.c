#include "agent_lease.h"

#include <errno.h>
#include <stdlib.h>

typedef struct {
    int port;
    rdzv_port_state_t state;
    int listeners;           /* sockets handed over on this port, still open */
    bool all_reuseport;      /* every one of them set SO_REUSEPORT */
} s_slot_t;

struct rdzv_lease {
    int range_base;
    int range_limit;
    size_t nslots;
    s_slot_t *slots;         /* the plan, in plan order */
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
    return 0;
}

void rdzv_lease_unprobe(rdzv_lease_t *self, int port)
{
    s_slot_t *slot = s_slot(self, port);
    if (slot && slot->state == RDZV_PORT_LEASED)
        slot->state = RDZV_PORT_FREE;
}

int rdzv_lease_probe_any(rdzv_lease_t *self, int *port_out)
{
    for (size_t i = 0; i < self->nslots; i++) {
        if (self->slots[i].state == RDZV_PORT_FREE) {
            self->slots[i].state = RDZV_PORT_LEASED;
            *port_out = self->slots[i].port;
            return 0;
        }
    }
    return EADDRINUSE;
}

int rdzv_lease_listen(rdzv_lease_t *self, int port, bool reuseport)
{
    if (!s_in_range(self, port))
        return EINVAL;
    s_slot_t *slot = s_slot(self, port);
    if (!slot)
        return EADDRINUSE;
    if (slot->state == RDZV_PORT_TAKEN) {
        if (!reuseport || !slot->all_reuseport)
            return EADDRINUSE;
        slot->listeners++;
        return 0;
    }
    slot->state = RDZV_PORT_TAKEN;
    slot->listeners = 1;
    slot->all_reuseport = reuseport;
    return 0;
}

void rdzv_lease_unlisten(rdzv_lease_t *self, int port)
{
    s_slot_t *slot = s_slot(self, port);
    if (!slot || slot->state != RDZV_PORT_TAKEN)
        return;
    if (--slot->listeners <= 0) {
        slot->listeners = 0;
        slot->state = RDZV_PORT_LEASED;
    }
}

void rdzv_lease_reset(rdzv_lease_t *self)
{
    for (size_t i = 0; i < self->nslots; i++) {
        self->slots[i].state = RDZV_PORT_FREE;
        self->slots[i].listeners = 0;
    }
}
