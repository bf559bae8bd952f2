//! The one module that talks to the server: JSON GETs/PATCH/DELETE through `fetch`, and uploads
//! through XMLHttpRequest (the only browser API that reports upload progress).

use serde::de::DeserializeOwned;
use wasm_bindgen::JsCast;
use wasm_bindgen::prelude::*;
use wasm_bindgen_futures::JsFuture;

async fn request(method: &str, url: &str, body: Option<String>) -> Result<String, String> {
    let init = web_sys::RequestInit::new();
    init.set_method(method);
    if let Some(b) = body {
        init.set_body(&JsValue::from_str(&b));
        let headers = web_sys::Headers::new().map_err(|e| format!("{e:?}"))?;
        headers
            .set("content-type", "application/json")
            .map_err(|e| format!("{e:?}"))?;
        init.set_headers(&headers);
    }
    let window = web_sys::window().ok_or("no window")?;
    let resp = JsFuture::from(window.fetch_with_str_and_init(url, &init))
        .await
        .map_err(|e| format!("network error: {e:?}"))?;
    let resp: web_sys::Response = resp.dyn_into().map_err(|_| "bad response")?;
    let text = JsFuture::from(resp.text().map_err(|e| format!("{e:?}"))?)
        .await
        .map_err(|e| format!("{e:?}"))?;
    let text = text.as_string().unwrap_or_default();
    if resp.ok() {
        Ok(text)
    } else {
        Err(error_message(&text)
            .unwrap_or_else(|| format!("{} {}", resp.status(), resp.status_text())))
    }
}

fn error_message(body: &str) -> Option<String> {
    serde_json::from_str::<serde_json::Value>(body)
        .ok()?
        .get("error")?
        .as_str()
        .map(str::to_string)
}

pub async fn get<T: DeserializeOwned>(url: &str) -> Result<T, String> {
    let text = request("GET", url, None).await?;
    serde_json::from_str(&text).map_err(|e| format!("unexpected answer from {url}: {e}"))
}

pub async fn patch(url: &str, body: serde_json::Value) -> Result<(), String> {
    request("PATCH", url, Some(body.to_string()))
        .await
        .map(|_| ())
}

pub async fn delete(url: &str) -> Result<(), String> {
    request("DELETE", url, None).await.map(|_| ())
}

/// Uploads `file` to `/api/snapshots`, calling `progress(sent, total)` as bytes go out; resolves
/// to the server's answer (after it has indexed the file) or its error message.
pub async fn upload(
    file: web_sys::File,
    token: &str,
    progress: impl Fn(f64, f64) + 'static,
) -> Result<serde_json::Value, String> {
    let xhr = web_sys::XmlHttpRequest::new().map_err(|e| format!("{e:?}"))?;
    let url = format!(
        "/api/snapshots?name={}&token={token}",
        js_sys::encode_uri_component(&file.name())
    );
    xhr.open("POST", &url).map_err(|e| format!("{e:?}"))?;
    let on_progress =
        Closure::<dyn Fn(web_sys::ProgressEvent)>::new(move |e: web_sys::ProgressEvent| {
            progress(e.loaded(), e.total())
        });
    if let Ok(up) = xhr.upload() {
        up.set_onprogress(Some(on_progress.as_ref().unchecked_ref()));
    }
    let done = js_sys::Promise::new(&mut |resolve, _reject| {
        let r1 = resolve.clone();
        let onload = Closure::once_into_js(move || {
            let _ = r1.call0(&JsValue::NULL);
        });
        xhr.set_onload(Some(onload.unchecked_ref()));
        let onerror = Closure::once_into_js(move || {
            let _ = resolve.call0(&JsValue::NULL);
        });
        xhr.set_onerror(Some(onerror.unchecked_ref()));
    });
    xhr.send_with_opt_blob(Some(&file))
        .map_err(|e| format!("{e:?}"))?;
    JsFuture::from(done).await.map_err(|e| format!("{e:?}"))?;
    drop(on_progress);
    let status = xhr.status().unwrap_or(0);
    let text = xhr.response_text().ok().flatten().unwrap_or_default();
    if status == 0 {
        return Err("the upload was interrupted (network error)".into());
    }
    if (200..300).contains(&status) {
        serde_json::from_str(&text).map_err(|e| format!("unexpected answer: {e}"))
    } else {
        Err(error_message(&text).unwrap_or_else(|| format!("upload failed with status {status}")))
    }
}
