//! Per-request control, as far as the configuration allows it: what a key may use
//! ([`KeyGrant`], 403 otherwise) and the limits a request may lower for itself
//! (`X-Enforce-Max-Retries`, `X-Enforce-Token-Budget`, when its model has
//! [`request_limits`](crate::ModelOptions::request_limits)). Two pipeline stages call in here:
//! [`admit_model`] before the model is resolved, [`apply`] once the profile is known.

use crate::auth::Granted;
use crate::config::{KeyGrant, Model};
use crate::error::ApiError;
use crate::headers as names;
use crate::session::StoredResponse;
use crate::state::App;
use axum::http::{HeaderMap, HeaderName, StatusCode};
use enforce_core::Budget;
use serde_json::{json, Map, Value};
use std::sync::Arc;

/// A request refused by a stage here: the `enforce_rejected_total` reason and the error (the
/// pipeline turns it into its rejection).
/// Boxed: the stages' `Result`s stay small on the happy path.
pub(crate) struct Refused(pub &'static str, pub Box<ApiError>);

fn rejected(reason: &'static str) -> impl FnOnce(ApiError) -> Refused {
    move |error| Refused(reason, Box::new(error))
}

/// The grant of the named key the request presented (`None`: an anonymous key, or no keys at
/// all).
pub(crate) fn grant(app: &App, granted: Option<Granted>) -> Option<&KeyGrant> {
    granted.and_then(|Granted(index)| app.config.key_grants.get(index))
}

/// The name of the named key a request presented.
pub(crate) fn key_name(app: &App, granted: Option<Granted>) -> Option<&str> {
    grant(app, granted).map(|g| g.name.as_str())
}

/// The 403 of a key asking for a model outside its list. It names the models the key may use
/// (not the others: a limited key does not learn what else this proxy serves).
pub(crate) fn model_forbidden(grant: &KeyGrant, id: &str) -> ApiError {
    let allowed = grant.models.as_deref().unwrap_or_default().join(", ");
    ApiError {
        param: Some("model"),
        ..ApiError::new(
            StatusCode::FORBIDDEN,
            "permission_error",
            "model_not_allowed",
            format!(
                "This API key ({}) may not use the model `{id}`. It may use: {allowed}.",
                grant.name
            ),
        )
    }
}

/// Access, before the model is resolved: the key may use model `id` and the profile
/// `X-Enforce-Profile` names, if any (checked here, so that a limited key learns nothing about
/// models and profiles outside its lists from a 404 or 400).
pub(crate) fn admit_model(
    grant: Option<&KeyGrant>,
    id: &str,
    headers: &HeaderMap,
) -> Result<(), Refused> {
    let Some(grant) = grant else {
        return Ok(());
    };
    if !grant.allows_model(id) {
        return Err(rejected("forbidden")(model_forbidden(grant, id)));
    }
    let named = requested_profile(headers).map_err(rejected("bad_request"))?;
    match named {
        Some(profile) if !grant.allows_profile(profile) => Err(rejected("forbidden")(
            profile_forbidden(grant, profile, "X-Enforce-Profile names it"),
        )),
        _ => Ok(()),
    }
}

/// The profile `X-Enforce-Profile` names (`None` when absent or blank). A value that is not
/// visible ASCII is a 400: ignoring it would enforce with another profile than the one asked.
pub(crate) fn requested_profile(headers: &HeaderMap) -> Result<Option<&str>, ApiError> {
    let Some(value) = headers.get(names::PROFILE) else {
        return Ok(None);
    };
    let name = value.to_str().map_err(|_| {
        ApiError::bad_request(
            format!(
                "The `{}` header must be a profile name in plain ASCII.",
                crate::headers::PROFILE_HEADER
            ),
            None,
        )
    })?;
    Ok(Some(name.trim()).filter(|n| !n.is_empty()))
}

/// The 403 of a key whose request would be enforced with a profile outside its list.
fn profile_forbidden(grant: &KeyGrant, profile: &str, why: &str) -> ApiError {
    let allowed = grant.profiles.as_deref().unwrap_or_default().join(", ");
    ApiError::new(
        StatusCode::FORBIDDEN,
        "permission_error",
        "profile_not_allowed",
        format!(
            "This API key ({}) may not use the profile `{profile}` ({why}). It may use: {allowed}.",
            grant.name
        ),
    )
}

/// Whether a key may read (or continue) a stored answer: one of a model it may use.
pub(crate) fn may_read(grant: Option<&KeyGrant>, stored: &StoredResponse) -> bool {
    grant.filter(|g| g.is_limited()).is_none_or(|g| {
        stored
            .head()
            .and_then(|head| head.model)
            .is_some_and(|model| g.allows_model(&model))
    })
}

/// Access, before the session stage: a request continuing a stored answer
/// (`previous_response_id`) continues one of a model its key may use; else the answer is
/// as unknown to it as one never stored (404, like the session stage's own).
pub(crate) async fn admit_continuation(
    app: &App,
    grant: Option<&KeyGrant>,
    continues: Option<&str>,
) -> Result<(), Refused> {
    let (Some(_), Some(id)) = (grant.filter(|g| g.is_limited()), continues) else {
        return Ok(());
    };
    match app.sessions.stored_response(id).await {
        Some(stored) if !may_read(grant, &stored) => {
            let error =
                previous_response_not_found(format!("Previous response with id '{id}' not found."));
            Err(rejected("unknown_response")(error))
        }
        _ => Ok(()),
    }
}

/// The 404 for a `previous_response_id` that names no stored answer the request may read.
pub(crate) fn previous_response_not_found(message: String) -> ApiError {
    ApiError {
        param: Some("previous_response_id"),
        ..ApiError::new(
            StatusCode::NOT_FOUND,
            "invalid_request_error",
            "previous_response_not_found",
            message,
        )
    }
}

/// The 403 of a limited key reading `/v1/sessions/{id}` (a session names no model to check).
pub(crate) fn sessions_forbidden(grant: &KeyGrant) -> ApiError {
    ApiError::new(
        StatusCode::FORBIDDEN,
        "permission_error",
        "sessions_not_allowed",
        format!(
            "This API key ({}) is limited to some models and may not read sessions; use a key without `models`/`profiles` limits.",
            grant.name
        ),
    )
}

/// Once the profile is known (the model's, a route's or `X-Enforce-Profile`'s): the key may
/// use it, and the limits the request asks for are applied to this request's enforcer. What
/// the limit headers did, for the audit record ([`applied_limits`]); `None` when the request
/// sent none.
pub(crate) fn apply(
    grant: Option<&KeyGrant>,
    model: &mut Arc<Model>,
    headers: &HeaderMap,
) -> Result<Option<Value>, Refused> {
    if let Some(grant) = grant.filter(|g| !g.allows_profile(&model.profile)) {
        let why = format!("the model `{}` enforces it for this request", model.id);
        let error = profile_forbidden(grant, &model.profile, &why);
        return Err(rejected("forbidden")(error));
    }
    let max_retries = limit::<u32>(headers, &names::MAX_RETRIES, "X-Enforce-Max-Retries", 0)?;
    let max_tokens = limit::<u64>(headers, &names::TOKEN_BUDGET, "X-Enforce-Token-Budget", 1)?;
    if max_retries.is_none() && max_tokens.is_none() {
        return Ok(None);
    }
    if !model.options.request_limits {
        let error = ApiError::bad_request(
            format!(
                "The model `{}` does not take per-request limits (X-Enforce-Max-Retries, X-Enforce-Token-Budget): its configuration sets them. The operator can allow them with `allow_request_limits: true` (under `server:` or on the model).",
                model.id
            ),
            None,
        );
        return Err(rejected("bad_request")(error));
    }
    let budget = Budget {
        max_tokens,
        ..Budget::default()
    };
    let narrowed = Arc::new(model.enforcer.narrowed(max_retries, &budget));
    Arc::make_mut(model).enforcer = narrowed;
    let policy = model.enforcer.policy();
    Ok(Some(applied_limits(
        max_retries.map(|asked| (asked, policy.max_retries)),
        max_tokens.map(|asked| (asked, policy.budget.max_tokens)),
    )))
}

/// The audit's `request_limits`: per limit header sent, the value asked, the value applied
/// (never above the profile's own) and who set it: `request`, or `profile` when the
/// profile's own limit was lower than asked.
fn applied_limits(
    max_retries: Option<(u32, u32)>,
    token_budget: Option<(u64, Option<u64>)>,
) -> Value {
    fn entry(asked: u64, applied: u64) -> Value {
        let from = if applied == asked {
            "request"
        } else {
            "profile"
        };
        json!({"asked": asked, "applied": applied, "from": from})
    }
    let mut limits = Map::new();
    if let Some((asked, applied)) = max_retries {
        limits.insert("max_retries".into(), entry(asked.into(), applied.into()));
    }
    if let Some((asked, applied)) = token_budget {
        // Narrowing keeps a budget once one was asked: `None` cannot come back.
        limits.insert(
            "token_budget".into(),
            entry(asked, applied.unwrap_or(asked)),
        );
    }
    Value::Object(limits)
}

/// A limit header's value: a whole number of at least `min`, or a 400 naming the header.
fn limit<T: std::str::FromStr + PartialOrd + From<u8>>(
    headers: &HeaderMap,
    name: &HeaderName,
    shown_name: &str,
    min: u8,
) -> Result<Option<T>, Refused> {
    let Some(value) = headers.get(name) else {
        return Ok(None);
    };
    let text = value.to_str().unwrap_or("").trim();
    match text.parse::<T>() {
        Ok(n) if n >= T::from(min) => Ok(Some(n)),
        _ => {
            let shown: String = text.chars().take(40).collect();
            let error = ApiError::bad_request(
                format!(
                    "The header {shown_name} must be a whole number from {min} up, got `{shown}`."
                ),
                None,
            );
            Err(rejected("bad_request")(error))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn applied_limits_say_whether_the_request_or_the_profile_set_them() {
        // Asked for less than the profile: the request's values apply.
        assert_eq!(
            applied_limits(Some((1, 1)), Some((500, Some(500)))),
            json!({"max_retries": {"asked": 1, "applied": 1, "from": "request"},
                   "token_budget": {"asked": 500, "applied": 500, "from": "request"}})
        );
        // Asked for more: the profile's own limits stay.
        assert_eq!(
            applied_limits(Some((9, 2)), Some((100_000, Some(60)))),
            json!({"max_retries": {"asked": 9, "applied": 2, "from": "profile"},
                   "token_budget": {"asked": 100_000, "applied": 60, "from": "profile"}})
        );
        // Only what was sent.
        assert_eq!(
            applied_limits(None, Some((7, Some(7)))),
            json!({"token_budget": {"asked": 7, "applied": 7, "from": "request"}})
        );
    }
}
