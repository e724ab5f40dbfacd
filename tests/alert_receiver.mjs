// A webhook receiver for tests/it_alerts.sh, listening on 127.0.0.1 (a free port, printed as
// the first line on stdout). Every request is appended as one JSON line to the log file given
// as the first argument: {path, id, timestamp, verified, status, body}.
//
// Paths say how to answer:
//   /std/...       verifies the Standard Webhooks signature with the `standardwebhooks` npm
//                  package (secret: $WH_SECRET) and answers 401 when it does not verify
//   /std-old/...   the same with $WH_SECRET_OLD (a receiver still on the secret being rotated
//                  out)
//   /slack/...     checks the body against the shape of a Slack incoming-webhook message
//                  (https://api.slack.com/messaging/webhooks, Block Kit limits from
//                  https://api.slack.com/reference/block-kit/blocks) and answers 400 if not
//   .../503xN/...  answers 503 (Retry-After: 1) to the first N requests on this path, then 200
//   .../hang/...   never answers
import http from "node:http";
import fs from "node:fs";
import { Webhook } from "standardwebhooks";

const log = process.argv[2];
const wh = process.env.WH_SECRET ? new Webhook(process.env.WH_SECRET) : null;
const whOld = process.env.WH_SECRET_OLD ? new Webhook(process.env.WH_SECRET_OLD) : null;
const seen = new Map(); // path -> requests so far

// The documented shape of an incoming-webhook message with blocks; returns a problem or null.
function slackProblem(m) {
  if (typeof m !== "object" || m === null || Array.isArray(m)) return "not an object";
  if (typeof m.text !== "string" || m.text.length === 0) return "no fallback text";
  if (!Array.isArray(m.blocks) || m.blocks.length === 0 || m.blocks.length > 50)
    return "blocks must be 1..50";
  const textObj = (t, types, max) =>
    t && types.includes(t.type) && typeof t.text === "string" && t.text.length > 0 &&
    t.text.length <= max;
  for (const b of m.blocks) {
    if (b.type === "header") {
      if (!textObj(b.text, ["plain_text"], 150)) return "header text must be plain_text <= 150";
    } else if (b.type === "section") {
      if (!textObj(b.text, ["mrkdwn", "plain_text"], 3000)) return "section text <= 3000";
    } else if (b.type === "context") {
      if (!Array.isArray(b.elements) || b.elements.length < 1 || b.elements.length > 10)
        return "context elements must be 1..10";
      for (const e of b.elements)
        if (!textObj(e, ["mrkdwn", "plain_text"], 3000)) return "context element text";
    } else if (b.type !== "divider") {
      return `unexpected block type ${b.type}`;
    }
    const keys = Object.keys(b).filter((k) => !["type", "text", "elements", "block_id"].includes(k));
    if (keys.length) return `unexpected block keys ${keys}`;
  }
  return null;
}

const server = http.createServer((req, res) => {
  const chunks = [];
  req.on("data", (c) => chunks.push(c));
  req.on("end", () => {
    const raw = Buffer.concat(chunks).toString("utf8");
    const n = (seen.get(req.url) || 0) + 1;
    seen.set(req.url, n);
    const rec = {
      path: req.url,
      id: req.headers["webhook-id"] || null,
      timestamp: req.headers["webhook-timestamp"] || null,
      signature: req.headers["webhook-signature"] || null,
      verified: null,
      problem: null,
      body: raw,
    };
    let status = 200;
    if (req.url.startsWith("/std")) {
      try {
        (req.url.startsWith("/std-old") ? whOld : wh).verify(raw, {
          "webhook-id": req.headers["webhook-id"],
          "webhook-timestamp": req.headers["webhook-timestamp"],
          "webhook-signature": req.headers["webhook-signature"],
        });
        rec.verified = true;
      } catch (e) {
        rec.verified = false;
        rec.problem = String(e.message || e);
        status = 401;
      }
    } else if (req.url.startsWith("/slack")) {
      let m = null;
      try {
        m = JSON.parse(raw);
      } catch (e) {
        rec.problem = "not JSON";
      }
      rec.problem = rec.problem || slackProblem(m);
      if (rec.problem) status = 400;
    }
    const fail = /\/503x(\d+)/.exec(req.url);
    if (status === 200 && fail && n <= Number(fail[1])) status = 503;
    if (req.url.includes("/hang")) {
      rec.status = null;
      fs.appendFileSync(log, JSON.stringify(rec) + "\n");
      return; // never answers
    }
    rec.status = status;
    fs.appendFileSync(log, JSON.stringify(rec) + "\n");
    const headers = { "content-type": "text/plain" };
    if (status === 503) headers["retry-after"] = "1";
    res.writeHead(status, headers);
    res.end(status === 200 ? "ok" : rec.problem || "unavailable");
  });
});
server.listen(0, "127.0.0.1", () => {
  console.log(server.address().port);
});
