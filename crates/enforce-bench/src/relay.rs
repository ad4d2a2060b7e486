//! A byte relay: the floor of any proxy on this machine. It forwards TCP bytes between a client
//! and the upstream without reading HTTP, so what it adds over `direct` is the cost of one more
//! process on the path (the extra loopback hop, the cross-core wake-ups), which no proxy can
//! avoid and which is part of every proxied row.

use tokio::net::{TcpListener, TcpStream};

/// Serves until the process is killed; prints its address first.
pub async fn serve(listen: &str, upstream: &str) -> anyhow::Result<()> {
    let listener = TcpListener::bind(listen).await?;
    println!("{}", listener.local_addr()?);
    loop {
        let (mut client, _) = listener.accept().await?;
        let upstream = upstream.to_string();
        tokio::spawn(async move {
            let Ok(mut server) = TcpStream::connect(&upstream).await else {
                return;
            };
            let _ = client.set_nodelay(true);
            let _ = server.set_nodelay(true);
            let _ = tokio::io::copy_bidirectional(&mut client, &mut server).await;
        });
    }
}
