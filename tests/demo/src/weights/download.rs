//! The HTTP side of a fetch: the client, and a download streamed into a file with a progress
//! bar and hashed on the way.

use std::fs::File;
use std::io::{self, BufWriter, Read, Write};
use std::path::Path;

use indicatif::{ProgressBar, ProgressStyle};
use sha2::{Digest, Sha256};

use super::cache::hex;
use super::FetchError;

/// The HTTP client: certificates checked against the system's trust store (which honours
/// `SSL_CERT_FILE`), like pip and curl, so that a TLS-inspecting proxy's CA is trusted where the
/// system trusts it.
pub(super) fn agent() -> ureq::Agent {
    let tls = ureq::tls::TlsConfig::builder()
        .root_certs(ureq::tls::RootCerts::PlatformVerifier)
        .build();
    ureq::Agent::config_builder()
        .tls_config(tls)
        .timeout_connect(Some(std::time::Duration::from_secs(30)))
        .build()
        .into()
}

/// Fails with [`FetchError::Checksum`] naming `name` unless `actual == expected`.
pub(super) fn check_sha(
    path: &Path,
    name: &str,
    expected: &str,
    actual: String,
) -> Result<(), FetchError> {
    if actual == expected {
        return Ok(());
    }
    Err(FetchError::Checksum {
        file: format!("{name} (downloaded to {})", path.display()),
        expected: expected.to_string(),
        actual,
        remedy: "run again to download it afresh".to_string(),
    })
}

/// Streams `url` into `dest` with a progress bar; returns the sha256 of what was written.
pub(super) fn download(url: &str, dest: &Path, size: Option<u64>) -> Result<String, FetchError> {
    let net = |e: ureq::Error| FetchError::Network {
        url: url.to_string(),
        error: Box::new(e),
    };
    let response = agent().get(url).call().map_err(net)?;
    let len = size.or_else(|| {
        response
            .headers()
            .get("content-length")
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.parse().ok())
    });
    let bar = match len {
        Some(n) => ProgressBar::new(n),
        None => ProgressBar::no_length(),
    };
    if let Ok(style) =
        ProgressStyle::with_template("{bar:40} {bytes}/{total_bytes} {bytes_per_sec} eta {eta}")
    {
        bar.set_style(style);
    }
    let mut reader = response.into_body().into_reader();
    let file = File::create(dest).map_err(|e| FetchError::io(dest, e))?;
    let mut out = BufWriter::new(file);
    let mut hasher = Sha256::new();
    let mut buf = vec![0u8; 1 << 16];
    let mut written = 0u64;
    loop {
        let n = match reader.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(net(ureq::Error::Io(e))),
        };
        hasher.update(&buf[..n]);
        out.write_all(&buf[..n])
            .map_err(|e| FetchError::io(dest, e))?;
        written += n as u64;
        bar.set_position(written);
    }
    out.flush().map_err(|e| FetchError::io(dest, e))?;
    bar.finish_and_clear();
    if let Some(n) = len.filter(|&n| n != written) {
        return Err(net(ureq::Error::Io(io::Error::new(
            io::ErrorKind::UnexpectedEof,
            format!("got {written} of {n} bytes"),
        ))));
    }
    Ok(hex(&hasher.finalize()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::fs;

    use crate::weights::tests::{assert_only, scratch};
    use crate::weights::TempPath;

    /// Serves one HTTP response that promises 1000 bytes and closes after 100.
    fn short_server() -> String {
        use std::net::TcpListener;
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        std::thread::spawn(move || {
            let (mut stream, _) = listener.accept().unwrap();
            let mut req = [0u8; 4096];
            let _ = stream.read(&mut req);
            let head = "HTTP/1.1 200 OK\r\nContent-Length: 1000\r\nConnection: close\r\n\r\n";
            stream.write_all(head.as_bytes()).unwrap();
            stream.write_all(&[1u8; 100]).unwrap();
        });
        format!("http://{addr}/pkg-0.1-py3-none-any.whl")
    }

    #[test]
    fn download_cut_midway_is_an_error_and_leaves_nothing() {
        let cache = scratch("cut");
        let url = short_server();
        {
            let tmp = TempPath::new(&cache, "pkg-0.1-py3-none-any.whl");
            let err = download(&url, &tmp.path, None).unwrap_err();
            assert!(matches!(err, FetchError::Network { .. }), "{err}");
            let msg = err.to_string();
            assert!(msg.contains(&url) && msg.contains("run again"), "{msg}");
        }
        assert_only(&cache, &[]);
        fs::remove_dir_all(&cache).unwrap();
    }
}
