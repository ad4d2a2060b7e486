//! The integration tests of enforce-validators in one test binary:
//! `cargo test -p enforce-validators --test it`.

mod partial;
mod scope;

/// Polls a future that is ready at once (every check here is; no runtime needed).
fn block_on<F: std::future::Future>(f: F) -> F::Output {
    let mut f = std::pin::pin!(f);
    let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
    loop {
        if let std::task::Poll::Ready(v) = f.as_mut().poll(&mut cx) {
            return v;
        }
    }
}
