//! What the handlers' annotations share: the session key parameter, the cross-site request header and the error
//! response. Kept apart from the
//! document, which names the handlers, so the handlers can name these without a circle.

use utoipa::openapi::{ContentBuilder, Ref, RefOr, Response, ResponseBuilder};

/// A session key in a path.
#[derive(utoipa::IntoParams)]
#[into_params(parameter_in = Path)]
#[allow(dead_code)]
pub(crate) struct SessionKey {
    /// 1 to 128 characters of A-Z, a-z, 0-9, '-', '_' and '.', not only dots (a browser drops '.' and '..' from a URL)
    #[param(pattern = r"^(?!\.+$)[A-Za-z0-9._-]{1,128}$")]
    key: String,
}

/// The header a request without a JSON body carries: a page on another site cannot make a browser send it.
#[derive(utoipa::IntoParams)]
#[into_params(parameter_in = Header)]
#[allow(dead_code)]
pub(crate) struct RequestHeader {
    /// any value, e.g. 1: required (or Content-Type: application/json), since a page on another site cannot make a
    /// browser send it
    #[param(rename = "X-Noetic-Request")]
    x_noetic_request: Option<String>,
}

/// The error every route answers with (`{"error": {"code", "message"}}`), as the shared response `Error`.
pub(crate) struct ApiErrorResponse;

impl<'r> utoipa::ToResponse<'r> for ApiErrorResponse {
    fn response() -> (&'r str, RefOr<Response>) {
        let json = ContentBuilder::new().schema(Some(Ref::from_schema_name("Error"))).build();
        ("Error", ResponseBuilder::new().description("A typed error").content("application/json", json).build().into())
    }
}
