/* ui_assets.h — inside the web/ folder: the dashboard's files as the build embeds them
 * (scripts/embed-ui.sh writes build/gen/ui.c). */
#ifndef TF_WEB_UI_ASSETS_H
#define TF_WEB_UI_ASSETS_H

#include <stddef.h>

struct tf_ui_asset {
	const char *name; /* "index.html", "ui/app.js", "ui/app.css" */
	const char *type; /* content type */
	const unsigned char *data;
	size_t len;
};
extern const struct tf_ui_asset tf_ui_assets[];
extern const int tf_ui_assets_count;

#endif
