/* log.h — one small logging module: levels checked before formatting, a tag per file,
 * plain lines for people or JSON lines for machines (TPUFLOW_LOG_FORMAT=json).
 *
 * Each .c file that logs defines its tag before including this header:
 *     #define TF_LOG_TAG "store"
 *     #include "common/log.h"
 */
#ifndef TF_LOG_H
#define TF_LOG_H

enum tf_log_level { TF_LOG_DEBUG, TF_LOG_INFO, TF_LOG_WARN, TF_LOG_ERROR, TF_LOG_LAST };

extern enum tf_log_level tf_log_threshold;

/* Sets the threshold from TPUFLOW_LOG (debug|info|warn|error) and the format from
 * TPUFLOW_LOG_FORMAT (text|json). Called once by main. */
void tf_log_init(void);

void tf_log_write(enum tf_log_level level, const char *tag, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

#ifndef TF_LOG_TAG
#define TF_LOG_TAG "tpuflow"
#endif

#define tf_log(level, ...)                                                                         \
	do {                                                                                       \
		if ((level) >= tf_log_threshold)                                                   \
			tf_log_write((level), TF_LOG_TAG, __VA_ARGS__);                            \
	} while (0)
#define tf_debug(...) tf_log(TF_LOG_DEBUG, __VA_ARGS__)
#define tf_info(...) tf_log(TF_LOG_INFO, __VA_ARGS__)
#define tf_warn(...) tf_log(TF_LOG_WARN, __VA_ARGS__)
#define tf_error(...) tf_log(TF_LOG_ERROR, __VA_ARGS__)

#endif
