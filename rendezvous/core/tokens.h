/* Group tokens scoped per group (--tokens DIR): the file DIR/GROUP holds
 * the token every request naming GROUP must carry, so one tenant's token
 * opens only its own groups. */
#ifndef RDZV_TOKENS_H
#define RDZV_TOKENS_H

#include <stdbool.h>
#include <stddef.h>

typedef struct rdzv_tokens rdzv_tokens_t;

/* NULL on failure (dir is not a directory), reason in err. */
rdzv_tokens_t *rdzv_tokens_new(const char *dir, char *err, size_t errlen);
void rdzv_tokens_destroy(rdzv_tokens_t **self_p);
/* Whether token (NULL: the request carried none) is group's. A group
 * without a readable file, or a name that is not a plain path under the
 * directory ("..", "." or empty components), is nobody's. The file is read
 * again when it changes, so a token is rotated by rewriting its file. */
bool rdzv_tokens_allow(rdzv_tokens_t *self, const char *group, const char *token);

#endif
