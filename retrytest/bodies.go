package retrytest

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
)

// The bodies below copy the shapes (and, where known, the wording) of what
// each API sends, so that a client's error parsing is tested against the
// real thing rather than a simplified stand-in.

// statusOverloaded is Anthropic's non-standard "overloaded" status.
const statusOverloaded = 529

// requestID is the provider's id for its n-th arrival, in the style of the
// request ids the LLM APIs send.
func requestID(n int) string { return "req_retrytest_" + strconv.Itoa(n) }

// js quotes s as a JSON string.
func js(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}

// errorBody returns the family's error body for status, with the error
// type typ ("" for the usual one), its content type, and the provider's
// request id for arrival n. limitKind says which limit a rate-limit
// rejection hit ("requests" or "tokens") and limit its size, for the
// messages that quote them.
func errorBody(f Family, status int, typ string, n int, limitKind string, limit int) (body, contentType string) {
	if (status == statusOverloaded && typ == "") || typ == "overloaded_error" {
		// 529 is Anthropic's; whoever sends it sends Anthropic's body.
		return anthropicError("overloaded_error", "Overloaded", n), "application/json"
	}
	switch f {
	case OpenAI:
		return openAIError(status, typ, limitKind, limit), "application/json"
	case Anthropic:
		if typ == "" {
			typ = anthropicTypes[status]
			if typ == "" {
				typ = "invalid_request_error"
				if status >= 500 {
					typ = "api_error"
				}
			}
		}
		msg := anthropicMessages[typ]
		if typ == "rate_limit_error" {
			msg = "This request would exceed your organization's rate limit. Please retry later."
			if limit > 0 {
				msg = fmt.Sprintf("This request would exceed the rate limit for your organization of %d %s. Please retry later.", limit, limitUnit(limitKind))
			}
		}
		if msg == "" {
			msg = http.StatusText(status)
		}
		return anthropicError(typ, msg, n), "application/json"
	case GitHub:
		return gitHubError(status, typ), "application/json; charset=utf-8"
	default:
		return problem(status, typ), "application/problem+json"
	}
}

// limitUnit names what a limit counts, for the messages that quote it.
func limitUnit(kind string) string {
	if kind == "tokens" {
		return "tokens"
	}
	return "requests"
}

// anthropicTypes is Anthropic's error type per status, from its API docs.
var anthropicTypes = map[int]string{
	400: "invalid_request_error",
	401: "authentication_error",
	402: "billing_error",
	403: "permission_error",
	404: "not_found_error",
	413: "request_too_large",
	429: "rate_limit_error",
	500: "api_error",
	504: "timeout_error",
	529: "overloaded_error",
}

var anthropicMessages = map[string]string{
	"invalid_request_error": "messages: at least one message is required",
	"authentication_error":  "invalid x-api-key",
	"billing_error":         "Your credit balance is too low to access the Anthropic API.",
	"permission_error":      "Your API key does not have permission to use the specified resource.",
	"not_found_error":       "model: not-a-model",
	"request_too_large":     "Request exceeds the maximum allowed number of bytes.",
	"api_error":             "Internal server error",
	"timeout_error":         "Request timeout",
	"overloaded_error":      "Overloaded",
}

func anthropicError(typ, msg string, n int) string {
	return `{"type":"error","error":{"type":` + js(typ) + `,"message":` + js(msg) + `},"request_id":` + js(requestID(n)) + `}`
}

// openAIKind is an OpenAI error: its type, code (empty for null) and message.
type openAIKind struct{ typ, code, msg string }

// openAIDefaults is the kind OpenAI sends per status.
var openAIDefaults = map[int]string{
	400: "invalid_request_error",
	401: "invalid_api_key",
	403: "unsupported_country_region_territory",
	404: "model_not_found",
	429: "rate_limit_exceeded",
	500: "server_error",
	503: "engine_overloaded",
}

// openAIKinds maps the names a Step may use (a type or a code) to the whole
// error, as OpenAI's API sends it.
var openAIKinds = map[string]openAIKind{
	"invalid_request_error":                {"invalid_request_error", "", "'messages' is a required property"},
	"invalid_api_key":                      {"invalid_request_error", "invalid_api_key", "Incorrect API key provided."},
	"unsupported_country_region_territory": {"request_forbidden", "unsupported_country_region_territory", "Country, region, or territory not supported"},
	"model_not_found":                      {"invalid_request_error", "model_not_found", "The model `not-a-model` does not exist or you do not have access to it."},
	"insufficient_quota":                   {"insufficient_quota", "insufficient_quota", "You exceeded your current quota, please check your plan and billing details."},
	"server_error":                         {"server_error", "", "The server had an error while processing your request. Sorry about that!"},
	"engine_overloaded":                    {"server_error", "", "The engine is currently overloaded, please try again later"},
}

func openAIError(status int, typ, limitKind string, limit int) string {
	if typ == "" {
		typ = openAIDefaults[status]
	}
	if typ == "rate_limit_exceeded" {
		limitKind = limitUnit(limitKind)
		msg := "Rate limit reached for " + limitKind + ". Please try again later."
		if limit > 0 {
			msg = fmt.Sprintf("Rate limit reached for %s: Limit %d, Used %d, Requested 1. Please try again later.", limitKind, limit, limit)
		}
		return openAIJSON(openAIKind{limitKind, "rate_limit_exceeded", msg})
	}
	k, ok := openAIKinds[typ]
	switch {
	case ok:
	case typ != "":
		// A kind of the caller's own: it is both the type and the code,
		// so a parser that reads either finds it.
		k = openAIKind{typ, typ, http.StatusText(status)}
	case status >= 500:
		k = openAIKinds["server_error"]
	default:
		k = openAIKinds["invalid_request_error"]
	}
	return openAIJSON(k)
}

func openAIJSON(k openAIKind) string {
	code := "null"
	if k.code != "" {
		code = js(k.code)
	}
	return `{"error":{"message":` + js(k.msg) + `,"type":` + js(k.typ) + `,"param":null,"code":` + code + `}}`
}

// GitHub's documentation links, which clients read: a secondary rate limit
// is recognised by its URL.
const (
	gitHubDocs          = "https://docs.github.com/rest"
	gitHubRateLimitDocs = "https://docs.github.com/rest/using-the-rest-api/rate-limits-for-the-rest-api"
	gitHubSecondaryDocs = gitHubRateLimitDocs + "#about-secondary-rate-limits"
)

func gitHubError(status int, typ string) string {
	docs := gitHubDocs
	var msg string
	switch {
	case typ == "secondary_rate_limit":
		msg = "You have exceeded a secondary rate limit. Please wait a few minutes before you try again. If you reach out to GitHub Support for help, please include the request ID."
		docs = gitHubSecondaryDocs
	case typ == "rate_limit" || (typ == "" && status == http.StatusTooManyRequests):
		msg = "API rate limit exceeded for 127.0.0.1. (But here's the good news: Authenticated requests get a higher rate limit. Check out the documentation for more details.)"
		docs = gitHubRateLimitDocs
	case typ != "":
		msg = typ
	default:
		msg = map[int]string{
			400: "Problems parsing JSON",
			401: "Bad credentials",
			403: "Resource not accessible by integration",
			404: "Not Found",
			422: "Validation Failed",
		}[status]
		if msg == "" {
			msg = http.StatusText(status)
		}
	}
	return `{"message":` + js(msg) + `,"documentation_url":` + js(docs) + `,"status":` + js(strconv.Itoa(status)) + `}`
}

// problem is an RFC 9457 problem details body. A typ of the caller's own is
// its type, a relative URI reference.
func problem(status int, typ string) string {
	if typ == "" {
		typ = "about:blank"
	}
	title := http.StatusText(status)
	if title == "" {
		title = "Error"
	}
	detail := title
	switch status {
	case http.StatusTooManyRequests:
		detail = "Request quota exhausted; see RateLimit and Retry-After."
	case http.StatusServiceUnavailable:
		detail = "The service is overloaded; try again later."
	}
	return `{"type":` + js(typ) + `,"title":` + js(title) + `,"status":` + strconv.Itoa(status) + `,"detail":` + js(detail) + `}`
}

// successBody is the family's small answer to a request that went through.
func successBody(f Family, n int) string {
	switch f {
	case OpenAI:
		return `{"id":"chatcmpl-` + strconv.Itoa(n) + `","object":"chat.completion","created":0,"model":"retrytest-model","choices":[{"index":0,"message":{"role":"assistant","content":"ok"},"finish_reason":"stop"}],"usage":{"prompt_tokens":1,"completion_tokens":1,"total_tokens":2}}`
	case Anthropic:
		return `{"id":"msg_retrytest_` + strconv.Itoa(n) + `","type":"message","role":"assistant","model":"retrytest-model","content":[{"type":"text","text":"ok"}],"stop_reason":"end_turn","stop_sequence":null,"usage":{"input_tokens":1,"output_tokens":1}}`
	case GitHub:
		return `{"id":` + strconv.Itoa(n) + `,"login":"octocat","type":"User"}`
	default:
		return `{"ok":true,"id":` + strconv.Itoa(n) + `}`
	}
}
