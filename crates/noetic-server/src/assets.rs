//! The page, embedded in the binary, and the API document, generated from the handlers: nothing is read from disk
//! or fetched from the network, and only these fixed routes serve them, so no request can reach another file.

use axum::Router;
use axum::http::header;
use axum::routing::get;

const JS: &str = "text/javascript; charset=utf-8";

/// Each file of the page: its route, content type and text. The scripts are ES modules that import each other by
/// these routes.
const FILES: &[(&str, &str, &str)] = &[
    ("/", "text/html; charset=utf-8", include_str!("../assets/index.html")),
    ("/app.css", "text/css; charset=utf-8", include_str!("../assets/app.css")),
    ("/app.js", JS, include_str!("../assets/app.js")),
    ("/dom.js", JS, include_str!("../assets/dom.js")),
    ("/markdown.js", JS, include_str!("../assets/markdown.js")),
    ("/approval.js", JS, include_str!("../assets/approval.js")),
    ("/chat.js", JS, include_str!("../assets/chat.js")),
    ("/side.js", JS, include_str!("../assets/side.js")),
    ("/rename.js", JS, include_str!("../assets/rename.js")),
    ("/sessions.js", JS, include_str!("../assets/sessions.js")),
];

/// The routes of the page's files (`GET /` is the page) and of `/openapi.json`, the API as OpenAPI 3.1 (generated
/// from the handlers, see [`crate::openapi`]).
pub(crate) fn routes<S: Clone + Send + Sync + 'static>(mut router: Router<S>) -> Router<S> {
    router = router.route(
        "/openapi.json",
        get(|| async {
            (
                [(header::CONTENT_TYPE, "application/json"), (header::CACHE_CONTROL, "no-cache")],
                crate::openapi::document(),
            )
        }),
    );
    for &(path, content_type, text) in FILES {
        router =
            router.route(
                path,
                get(move || async move {
                    ([(header::CONTENT_TYPE, content_type), (header::CACHE_CONTROL, "no-cache")], text)
                }),
            );
    }
    router
}

/// The paths [`routes`] serves.
#[cfg(test)]
pub(crate) fn paths() -> impl Iterator<Item = &'static str> {
    FILES.iter().map(|&(path, _, _)| path)
}

#[cfg(test)]
mod tests {
    /// The page's scripts only import files the server serves.
    #[test]
    fn every_module_a_script_imports_is_served() {
        let served: Vec<&str> = super::paths().collect();
        for &(path, _, text) in super::FILES.iter().filter(|(p, _, _)| p.ends_with(".js")) {
            for line in text.lines().filter(|l| l.starts_with("import ")) {
                let Some(from) = line.split(" from \"").nth(1).and_then(|rest| rest.split('"').next()) else {
                    continue;
                };
                let target = from.trim_start_matches('.');
                assert!(served.contains(&target), "{path} imports {from}, which is not served");
            }
        }
    }
}
