//! The page and its assets, embedded in the binary (no build step: plain HTML, CSS and
//! JavaScript in `assets/`). The charts are uPlot (MIT, `assets/vendor/`, with its license),
//! vendored as its release's minified file.

/// One embedded file.
#[derive(Clone, Copy, Debug)]
pub struct Asset {
    pub path: &'static str,
    pub content_type: &'static str,
    pub body: &'static [u8],
}

const HTML: &str = "text/html; charset=utf-8";
const CSS: &str = "text/css; charset=utf-8";
const JS: &str = "text/javascript; charset=utf-8";

/// Every file served, by path.
pub const ASSETS: &[Asset] = &[
    Asset {
        path: "/",
        content_type: HTML,
        body: include_bytes!("../assets/index.html"),
    },
    Asset {
        path: "/assets/dashboard.css",
        content_type: CSS,
        body: include_bytes!("../assets/dashboard.css"),
    },
    Asset {
        path: "/assets/dashboard.js",
        content_type: JS,
        body: include_bytes!("../assets/dashboard.js"),
    },
    Asset {
        path: "/assets/uPlot.min.css",
        content_type: CSS,
        body: include_bytes!("../assets/vendor/uPlot.min.css"),
    },
    Asset {
        path: "/assets/uPlot.iife.min.js",
        content_type: JS,
        body: include_bytes!("../assets/vendor/uPlot.iife.min.js"),
    },
    Asset {
        path: "/assets/uPlot.LICENSE.txt",
        content_type: "text/plain; charset=utf-8",
        body: include_bytes!("../assets/vendor/uPlot.LICENSE"),
    },
    Asset {
        path: "/favicon.svg",
        content_type: "image/svg+xml",
        body: include_bytes!("../assets/favicon.svg"),
    },
];

/// The file served at `path` (`/index.html` is `/`).
pub fn find(path: &str) -> Option<&'static Asset> {
    let path = if path == "/index.html" { "/" } else { path };
    ASSETS.iter().find(|a| a.path == path)
}
