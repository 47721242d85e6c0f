//! Each request's own reactive owner.
//!
//! leptos keeps "the current owner" in a thread-local. A page that renders sets its root owner
//! there (`Owner::new_root`) and leaves it set while it waits on the database. leptos_axum's
//! server-function handler (0.8) makes its owner with `Owner::new()`: a *child* of whatever is
//! current on the thread that polls it. A context the handler does not provide itself would then
//! be found on another request's page — that request's user or response, say. (Its static-file
//! handler did the same; `routes::site_files` replaced it.) So every request is polled under a
//! root owner of its own, made when it arrives: what its handlers make hangs under that, and a
//! lookup finds nothing another request provided.

use axum::extract::Request;
use axum::middleware::Next;
use axum::response::Response;
use leptos::prelude::Owner;
use leptos::reactive::computed::ScopedFuture;

/// Runs the rest of the request with a fresh root owner current at each poll.
pub async fn own_owner(request: Request, next: Next) -> Response {
    // `new_root` also makes it current on this thread; each poll below sets it again, and puts
    // back what was current before.
    let root = Owner::new_root(None);
    ScopedFuture {
        owner: root,
        observer: None,
        fut: next.run(request),
    }
    .await
}

#[cfg(test)]
mod tests {
    use axum::body::Body;
    use axum::http::Request;
    use axum::routing::get;
    use axum::Router;
    use leptos::prelude::{provide_context, use_context, Owner};
    use tower::ServiceExt;

    #[derive(Clone)]
    struct AnotherRequests(&'static str);

    /// What leptos_axum's server-function handler does: an owner made under the current one, and
    /// a context looked up there that it did not provide.
    async fn handler() -> String {
        tokio::task::yield_now().await;
        let owner = Owner::new();
        owner
            .with(use_context::<AnotherRequests>)
            .map_or_else(|| "nothing".to_owned(), |found| found.0.to_owned())
    }

    async fn answer(router: Router) -> String {
        let response = router
            .oneshot(Request::get("/").body(Body::empty()).unwrap())
            .await
            .unwrap();
        let body = axum::body::to_bytes(response.into_body(), 1024)
            .await
            .unwrap();
        String::from_utf8(body.to_vec()).unwrap()
    }

    // One thread: every poll here runs where the page below left its owner.
    #[tokio::test(flavor = "current_thread")]
    async fn a_request_never_finds_what_another_request_left_on_its_thread() {
        // A page that rendered on this thread and waits: its root owner is still current.
        let page = Owner::new_root(None);
        provide_context(AnotherRequests("a page's user"));

        // Without the layer the handler finds the page's context (the hazard is real here).
        let bare = Router::new().route("/", get(handler));
        assert_eq!(answer(bare).await, "a page's user");

        let guarded = Router::new()
            .route("/", get(handler))
            .layer(axum::middleware::from_fn(super::own_owner));
        assert_eq!(answer(guarded.clone()).await, "nothing");
        // And again, with the page's owner set anew in between.
        page.set();
        assert_eq!(answer(guarded).await, "nothing");
        drop(page);
    }
}
