/* Sockets the agent binds: reservations that hold the plan's ports, and
 * the sockets it hands over to the engine's binds. Both set SO_REUSEPORT
 * and never SO_REUSEADDR, so only sockets of the agent's own uid can ever
 * bind beside a reservation (docs/agent.md). */
#ifndef RDZV_AGENT_RESERVE_H
#define RDZV_AGENT_RESERVE_H

#include <stdbool.h>
#include <stddef.h>
#include <sys/socket.h>

/* Binds port on [::] with IPV6_V6ONLY off (both families), or on 0.0.0.0
 * where IPv6 is unavailable; bound, not listening. SO_REUSEPORT would let a
 * second agent of the same uid in beside a live reservation (two groups on
 * one host network whose plans overlap), so *lock first gets this network
 * namespace's lock on the port: an abstract unix socket, which only one
 * process can hold and the kernel frees when it dies. Returns the
 * descriptor, or -1 with the reason (naming the agent that holds the port)
 * in err, and the bind's errno in *bind_errno where the bind failed (0
 * otherwise). Keep *lock open as long as the reservation. Where a process
 * of another uid squats the lock's name and nothing holds the port (that
 * process cannot share it), *lock is a name of this uid's agents instead;
 * it is RDZV_RESERVE_NO_LOCK where that is squatted too (the reservation
 * goes on without, and rdzv_reserve_lock_retake takes the lock later).
 * A holder of the name is called an rdzv agent in err only when it runs
 * `rdzv agent`; otherwise it is named for what it is. */
#define RDZV_RESERVE_NO_LOCK (-2)
int rdzv_reserve_port(int port, int *lock, int *bind_errno, char *err, size_t errlen);

/* Takes port's lock where rdzv_reserve_port went on without it, once the
 * squatter has let it go: until then, another agent of this uid could
 * take the lock and reserve the port beside this one. Returns the lock
 * (and logs so), or a negative errno value while it is still held. */
int rdzv_reserve_lock_retake(int port);

/* Accepts and closes every connection waiting on a lock from
 * rdzv_reserve_port: another agent connects to learn who holds it. Call it
 * when the lock is readable, so its queue never fills. */
void rdzv_reserve_lock_answer(int lock);

/* Whether a bind with SO_REUSEADDR (never listening, closed at once) would
 * get port where the reservation's bind did not: then only sockets in
 * TIME_WAIT stand in the way, and they go by themselves. */
bool rdzv_reserve_would_reuse(int port);

/* A TCP socket of addr's family bound to addr, with IPV6_V6ONLY as given
 * (AF_INET6 only), next to the reservation. Returns the descriptor, or a
 * negative errno value (what the caller's bind() should fail with). */
int rdzv_reserve_handover(const struct sockaddr *addr, socklen_t addrlen,
                          bool v6only);

#endif
