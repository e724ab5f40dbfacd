/* ui.c — owns serving the dashboard: the page shell, its script and its style sheet, which
 * the build bundles (esbuild) and embeds (scripts/embed-ui.sh -> build/gen/ui.c). The page
 * holds no data of its own: it calls the API with the user's token.
 */
#include "web/api.h"
#include "web/ui_assets.h"

#include "common/common.h"

#include <string.h>

/* The page may load its own script, style sheet and images and call its own origin: no
 * inline script, no third-party origin, no framing. */
static const char ui_csp[] = "default-src 'self'; img-src 'self' data:; object-src 'none'; "
                             "base-uri 'none'; form-action 'self'; frame-ancestors 'none'";

void tf_web_ui(struct tf_web_req *rq, struct tf_web_resp *rs)
{
	const char *name = strcmp(rq->path, "/") ? rq->path + 1 : "index.html";
	for (int i = 0; i < tf_ui_assets_count; i++) {
		const struct tf_ui_asset *a = &tf_ui_assets[i];
		if (strcmp(a->name, name))
			continue;
		rs->status = 200;
		rs->body = tf_xmalloc(a->len ? a->len : 1);
		memcpy(rs->body, a->data, a->len);
		rs->len = a->len;
		rs->type = a->type;
		rs->csp = ui_csp;
		return;
	}
	tf_web_problem(rs, 404, rq->path, "the dashboard has no file '%s' (rebuild: make)", name);
}
