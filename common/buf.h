/* buf.h — a growable buffer of bytes or text (git's strbuf): appends never fail (allocation
 * aborts, common.h), text stays NUL-terminated, so messages of any length are built without
 * fixed widths (`%.300s`) or truncation.
 *
 * Ownership: zero-initialise (`struct tf_buf b = {0};`), append, then tf_buf_release (or take
 * the storage with tf_buf_detach). */
#ifndef TF_BUF_H
#define TF_BUF_H

#include <stdarg.h>
#include <stddef.h>

struct tf_buf {
	unsigned char *data; /* owned storage, NULL when empty; data[len] is '\0' once anything
	                        was appended */
	size_t len;          /* bytes used (the NUL not counted) */
	size_t cap;          /* bytes allocated */
};

void tf_buf_append(struct tf_buf *b, const void *p, size_t n);
/* printf onto the end. */
void tf_buf_printf(struct tf_buf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void tf_buf_vprintf(struct tf_buf *b, const char *fmt, va_list ap)
    __attribute__((format(printf, 2, 0)));
/* Appends the NULL-terminated list as words for people: "a, b or c" (`last` is "or" or
 * "and"; each name wrapped in `quote`, e.g. "`" for Markdown, "" for none). */
void tf_buf_names(struct tf_buf *b, const char *const *names, const char *last, const char *quote);
/* The text so far ("" when empty); valid until the next append or release. */
const char *tf_buf_str(const struct tf_buf *b);
/* Hands the storage to the caller (a NUL-terminated string, "" when empty; free it) and
 * leaves b empty. */
char *tf_buf_detach(struct tf_buf *b);
/* Copies the text into err[0..errlen) (truncated, NUL-terminated; nothing when errlen is 0):
 * the bridge to the functions that report through err/errlen. */
void tf_buf_copy_to(const struct tf_buf *b, char *err, size_t errlen);
void tf_buf_release(struct tf_buf *b); /* NULL is a no-op */

#endif
