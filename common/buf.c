/* buf.c — the growable buffer of buf.h. */
#include "common/buf.h"
#include "common/common.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Room for n more bytes and the NUL. */
static void grow(struct tf_buf *b, size_t n)
{
	if (b->len + n + 1 <= b->cap)
		return;
	size_t cap = b->cap ? b->cap : 256;
	while (cap < b->len + n + 1)
		cap *= 2;
	b->data = tf_xrealloc(b->data, cap);
	b->cap = cap;
}

void tf_buf_append(struct tf_buf *b, const void *p, size_t n)
{
	grow(b, n);
	if (n)
		memcpy(b->data + b->len, p, n);
	b->len += n;
	b->data[b->len] = '\0';
}

void tf_buf_vprintf(struct tf_buf *b, const char *fmt, va_list ap)
{
	va_list again;
	va_copy(again, ap);
	grow(b, 64);
	int n = vsnprintf((char *)b->data + b->len, b->cap - b->len, fmt, ap);
	if (n >= 0 && (size_t)n >= b->cap - b->len) {
		grow(b, (size_t)n);
		n = vsnprintf((char *)b->data + b->len, b->cap - b->len, fmt, again);
	}
	va_end(again);
	if (n > 0)
		b->len += (size_t)n;
	b->data[b->len] = '\0';
}

void tf_buf_printf(struct tf_buf *b, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	tf_buf_vprintf(b, fmt, ap);
	va_end(ap);
}

const char *tf_buf_str(const struct tf_buf *b)
{
	return b->data ? (const char *)b->data : "";
}

char *tf_buf_detach(struct tf_buf *b)
{
	char *s = b->data ? (char *)b->data : tf_xstrdup("");
	b->data = NULL;
	b->len = b->cap = 0;
	return s;
}

void tf_buf_names(struct tf_buf *b, const char *const *names, const char *last, const char *quote)
{
	for (size_t i = 0; names[i]; i++) {
		if (i && names[i + 1])
			tf_buf_printf(b, ", ");
		else if (i)
			tf_buf_printf(b, " %s ", last);
		tf_buf_printf(b, "%s%s%s", quote, names[i], quote);
	}
}

void tf_buf_copy_to(const struct tf_buf *b, char *err, size_t errlen)
{
	if (err && errlen)
		snprintf(err, errlen, "%s", tf_buf_str(b));
}

void tf_buf_release(struct tf_buf *b)
{
	if (!b)
		return;
	free(b->data);
	b->data = NULL;
	b->len = b->cap = 0;
}
