//! The dashboard's HTML pages and assets. A page is a shell rendered here (its title
//! and the job it shows, escaped by `html-escape`); `assets/app.js` fills it from the
//! JSON API and redraws it about every second. Nothing dynamic is ever written into a
//! page unescaped, and the script builds the DOM with `textContent` and SVG elements,
//! never with HTML strings.

use axum::http::header;
use axum::response::{IntoResponse, Response};
use html_escape::{encode_double_quoted_attribute as attr, encode_text as text};

const APP_JS: &str = include_str!("assets/app.js");
const STYLE_CSS: &str = include_str!("assets/style.css");
const FAVICON_SVG: &str = include_str!("assets/favicon.svg");

/// An asset by name: its content type and text.
pub(super) fn asset(name: &str) -> Option<(&'static str, &'static str)> {
    match name {
        "app.js" => Some(("text/javascript; charset=utf-8", APP_JS)),
        "style.css" => Some(("text/css; charset=utf-8", STYLE_CSS)),
        "favicon.svg" => Some(("image/svg+xml", FAVICON_SVG)),
        _ => None,
    }
}

/// An HTML answer.
pub(super) fn html(body: String) -> Response {
    ([(header::CONTENT_TYPE, "text/html; charset=utf-8")], body).into_response()
}

/// The frame of every page: `page` and `job` tell the script what to show; `csrf`,
/// the session's CSRF token, is written into pages that have actions.
fn frame(title: &str, page: &str, job: &str, csrf: Option<&str>, main: &str) -> String {
    format!(
        r#"<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>{title} · brook</title>{csrf}
<link rel="stylesheet" href="/ui/assets/style.css">
<link rel="icon" href="/ui/assets/favicon.svg" type="image/svg+xml">
</head>
<body data-page="{page}" data-job="{job}">
<header><a href="/" class="brand">brook</a><nav><a href="/">Jobs</a> <a href="/ui/topics">Topics and groups</a></nav><span class="crumb">{title}</span><span id="live" class="live">connecting…</span></header>
<main>
{main}
</main>
<script src="/ui/assets/app.js"></script>
</body>
</html>
"#,
        title = text(title),
        csrf = csrf.map_or(String::new(), |t| format!(
            "\n<meta name=\"brook-csrf\" content=\"{}\">",
            attr(t)
        )),
        page = attr(page),
        job = attr(job),
    )
}

/// The Jobs page.
pub(super) fn jobs_page() -> String {
    frame(
        "Jobs",
        "jobs",
        "",
        None,
        r#"<section><h2>Jobs</h2>
<table id="jobs"><thead><tr><th>job</th><th>name</th><th>state</th><th>uptime</th><th>attempts</th><th>records in/s (sources)</th><th>last failure</th></tr></thead><tbody></tbody></table>
<p id="empty" class="note" hidden>No jobs yet: <code>brook submit job.yaml</code>.</p>
</section>"#,
    )
}

/// The Topics and groups page.
pub(super) fn topics_page() -> String {
    frame(
        "Topics and groups",
        "topics",
        "",
        None,
        r#"<p id="nolog" class="note" hidden>This server holds no log: start the runner with <code>--broker-listen</code> to see its topics and groups here.</p>
<section><h2>Topics</h2>
<table id="topics"><thead><tr><th>topic</th><th>partition</th><th>start offset</th><th>end offset</th><th>stable offset</th><th>size</th><th>segments</th><th>retention</th></tr></thead><tbody></tbody></table></section>
<section><h2>Consumer groups</h2>
<table id="groups"><thead><tr><th>group</th><th>state</th><th>members</th><th>lag, last 10 min</th><th>topic/partition</th><th>committed</th><th>end</th><th>lag</th><th>member</th></tr></thead><tbody></tbody></table></section>"#,
    )
}

/// A job's page; `csrf` enables its actions (cancel, resume).
pub(super) fn job_page(id: &str, name: &str, csrf: Option<&str>) -> String {
    frame(
        &format!("{name} ({id})"),
        "job",
        id,
        csrf,
        r#"<section id="summary"></section>
<section id="actions" hidden><button id="cancel" type="button">Cancel</button> <button id="cancel-savepoint" type="button">Cancel with savepoint</button> <button id="resume" type="button">Resume</button> <span id="action-result" class="note"></span></section>
<section><h2>Operator graph</h2>
<p class="note">One box per task (chained operators run in one task); per operator: parallelism, records in and out per second, busy and backpressured time per subtask.</p>
<svg id="graph" xmlns="http://www.w3.org/2000/svg" role="img" aria-label="operator graph"></svg></section>
<section><h2>Operators and subtasks</h2>
<table id="operators"><thead><tr><th>operator</th><th>subtask</th><th>records in</th><th>records out</th><th>in/s</th><th>out/s</th><th>busy</th><th>backpressured</th><th>watermark</th><th>skew</th></tr></thead><tbody></tbody></table></section>
<section><h2>Hot keys</h2>
<p class="note">Per keyed operator, the keys with the most records in the last minute (30 to 60 s), estimated from a sample of about one record in 32; share is of the operator's records.</p>
<table id="hotkeys"><thead><tr><th>operator</th><th>key</th><th>subtask</th><th>records</th><th>share</th></tr></thead><tbody></tbody></table>
<p id="hotkeys-empty" class="note" hidden>No keyed operator has counted records yet.</p></section>
<section><h2>Watermarks</h2>
<h3>Who holds the watermark back</h3>
<table id="gates"><thead><tr><th>operator</th><th>its watermark</th><th>held back by (split)</th><th>split watermark</th><th>for</th><th>why</th></tr></thead><tbody></tbody></table>
<h3>Source splits</h3>
<p class="note">Late records of a split: records read at or behind its own watermark, so more out of order than its source allows; they are late for a window once its operator's watermark has passed them too (unless a slower split holds it back). An operator's late records are those it dropped or sent to its late output. A YAML job's Arrow batch counts once.</p>
<table id="splits"><thead><tr><th>source</th><th>subtask</th><th>split</th><th>watermark</th><th>behind the newest split</th><th>idle</th><th>offset</th><th>lag (records)</th><th>late records</th></tr></thead><tbody></tbody></table>
<h3>Operators</h3>
<table id="watermarks"><thead><tr><th>operator</th><th>watermark</th><th>late records</th></tr></thead><tbody></tbody></table></section>
<section><h2>Checkpoints</h2>
<p id="cp-summary" class="note"></p>
<table id="checkpoints"><thead><tr><th>id</th><th>triggered</th><th>duration</th><th>full size</th><th>incremental</th><th>alignment (slowest task)</th><th>status</th></tr></thead><tbody></tbody></table>
<h3>Retained in the checkpoint directory (across restarts)</h3>
<p id="cp-restored" class="note"></p>
<table id="retained"><thead><tr><th>id</th><th>triggered</th><th>full size</th><th>restored by attempt</th></tr></thead><tbody></tbody></table>
<h3>Savepoints</h3>
<table id="savepoints"><thead><tr><th>#</th><th>directory</th></tr></thead><tbody></tbody></table>
<p id="savepoints-empty" class="note" hidden>None taken (Cancel with savepoint, or <code>brook cancel --savepoint</code>).</p></section>
<section><h2>Attempts</h2>
<table id="attempts"><thead><tr><th>#</th><th>started</th><th>ended</th><th>outcome</th><th>restored from</th><th>end of stderr</th></tr></thead><tbody></tbody></table></section>"#,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_escaped_in_the_page() {
        let page = job_page("a-1", "<script>x</script>\"", Some("\"><x"));
        assert!(!page.contains("\"><x"), "{page}");
        assert!(!page.contains("<script>x"), "{page}");
        assert!(page.contains("&lt;script&gt;x&lt;/script&gt;"), "{page}");
        let framed = frame("t", "job", "\"><img src=x>", None, "");
        assert!(!framed.contains("\"><img"), "{framed}");
    }
}
