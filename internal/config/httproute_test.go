package config

import (
	"errors"
	"os"
	"strings"
	"testing"
)

// TestDecodeTrafficFields: fault (fixed delay with percentage and with
// the deprecated percent, HTTP and gRPC aborts), directResponse (string
// and base64 bytes) and headers (route and destination) decode as Istio
// reads them.
func TestDecodeTrafficFields(t *testing.T) {
	b, err := os.ReadFile("testdata/traffic.yaml")
	if err != nil {
		t.Fatal(err)
	}
	objs, err := Decode(b)
	if err != nil {
		t.Fatal(err)
	}
	h := objs[0].VirtualService.Http
	if d := h[0].Fault.GetDelay(); d.GetFixedDelay().AsDuration().Seconds() != 7 || d.GetPercentage().GetValue() != 100 {
		t.Fatalf("delay: %v", d)
	}
	if a := h[1].Fault.GetAbort(); a.GetHttpStatus() != 500 || a.GetPercentage().GetValue() != 100 {
		t.Fatalf("abort: %v", a)
	}
	if f := h[2].Fault; f.GetDelay().GetPercent() != 50 || f.GetAbort().GetGrpcStatus() != "UNAVAILABLE" || GRPCStatusCode("UNAVAILABLE") != 14 {
		t.Fatalf("grpc fault: %v", f)
	}
	if d := h[3].DirectResponse; d.GetStatus() != 200 || d.GetBody().GetString_() != "ok" {
		t.Fatalf("direct: %v", d)
	}
	if d := h[4].DirectResponse; d.GetStatus() != 418 || string(d.GetBody().GetBytes()) != "short and stout" {
		t.Fatalf("direct bytes: %v", d)
	}
	hr := h[5]
	if hr.Headers.GetRequest().GetSet()["x-route"] != "ratings" || hr.Headers.GetResponse().GetRemove()[0] != "server" ||
		hr.Route[0].Headers.GetRequest().GetSet()["x-version"] != "v1" {
		t.Fatalf("headers: %v", hr)
	}
	if rw, c := h[6].Rewrite, h[6].CorsPolicy; rw.GetUri() != "/ratings" || rw.GetAuthority() != "ratings.internal" ||
		len(c.GetAllowOrigins()) != 2 || c.GetMaxAge().AsDuration().Hours() != 24 || !c.GetAllowCredentials().GetValue() || c.GetUnmatchedPreflights().String() != "IGNORE" {
		t.Fatalf("rewrite and cors: %v", h[6])
	}
	if rr := h[7].Rewrite.GetUriRegexRewrite(); rr.GetMatch() != `^/svc/([^/]+)(/.*)$` || rr.GetRewrite() != `\2/of/\1` {
		t.Fatalf("regex rewrite: %v", h[7])
	}
	if rd := h[8].Redirect; rd.GetPrefixRewrite() != "/new/" || rd.GetPort() != 8443 || rd.GetRedirectCode() != 308 || rd.GetScheme() != "https" {
		t.Fatalf("redirect: %v", h[8])
	}
	if rd := h[9].Redirect; rd.GetUri() != "/here" || rd.GetDerivePort().String() != "FROM_REQUEST_PORT" {
		t.Fatalf("redirect with the request's port: %v", h[9])
	}
}

// TestTrafficFieldErrors: bad fault, directResponse and headers values
// are refused, each naming its field and what is wrong.
func TestTrafficFieldErrors(t *testing.T) {
	route := "    route: [{destination: {host: orders}}]\n"
	for _, c := range []struct {
		name, in, path, msg string
		sentinel            error
	}{
		{"empty fault", "  - fault: {}\n" + route, "spec.http[0].fault", "set delay, abort or both", ErrInvalid},
		{"delay without fixedDelay", "  - fault: {delay: {percentage: {value: 10}}}\n" + route, "spec.http[0].fault.delay.fixedDelay", "required", ErrInvalid},
		{"delay under 1ms", "  - fault: {delay: {fixedDelay: 1us}}\n" + route, "spec.http[0].fault.delay.fixedDelay", "at least 1ms", ErrInvalid},
		{"exponential delay", "  - fault: {delay: {exponentialDelay: 1s}}\n" + route, "spec.http[0].fault.delay.exponentialDelay", "not supported", ErrNotSupported},
		{"percent out of range", "  - fault: {delay: {fixedDelay: 1s, percent: 101}}\n" + route, "spec.http[0].fault.delay.percent", "101 not in [0, 100]", ErrInvalid},
		{"percent and percentage", "  - fault: {delay: {fixedDelay: 1s, percent: 10, percentage: {value: 10}}}\n" + route, "spec.http[0].fault.delay.percent", "not both", ErrInvalid},
		{"percentage out of range", "  - fault: {abort: {httpStatus: 500, percentage: {value: 100.5}}}\n" + route, "spec.http[0].fault.abort.percentage.value", "100.5 not in [0, 100]", ErrInvalid},
		{"abort status", "  - fault: {abort: {httpStatus: 700}}\n" + route, "spec.http[0].fault.abort.httpStatus", "700 not in [200, 599]", ErrInvalid},
		{"abort without error", "  - fault: {abort: {percentage: {value: 1}}}\n" + route, "spec.http[0].fault.abort", "set httpStatus or grpcStatus", ErrInvalid},
		{"grpc status name", "  - fault: {abort: {grpcStatus: Unavailable}}\n" + route, "spec.http[0].fault.abort.grpcStatus", `"Unavailable" is not a gRPC status name`, ErrInvalid},
		{"http2 error", "  - fault: {abort: {http2Error: REFUSED_STREAM}}\n" + route, "spec.http[0].fault.abort.http2Error", "not supported", ErrNotSupported},
		{"direct with route", "  - directResponse: {status: 200}\n" + route, "spec.http[0].directResponse", "may not be set with route", ErrInvalid},
		{"direct status", "  - directResponse: {status: 99}\n", "spec.http[0].directResponse.status", "99 not in [200, 599]", ErrInvalid},
		{"direct bytes", "  - directResponse: {status: 200, body: {bytes: 'not base64!'}}\n", "spec.http[0].directResponse.body.bytes", "not base64-encoded bytes", ErrInvalid},
		{"no route", "  - name: x\n", "spec.http[0].route", "or a directResponse", ErrInvalid},
		{"pseudo header", "  - headers: {request: {set: {':path': /x}}}\n" + route, "spec.http[0].headers.request.set[:path]", "pseudo-headers cannot be changed", ErrInvalid},
		{"host header", "  - headers: {request: {remove: [Host]}}\n" + route, "spec.http[0].headers.request.remove[0]", "the Host header cannot be changed", ErrInvalid},
		{"bad name", "  - headers: {response: {add: {'x a': b}}}\n" + route, "spec.http[0].headers.response.add[x a]", "is not a header name", ErrInvalid},
		{"formatter", "  - headers: {request: {set: {x-ip: '%DOWNSTREAM_REMOTE_ADDRESS%'}}}\n" + route, "spec.http[0].headers.request.set[x-ip]", "substitution is not supported", ErrInvalid},
		{"destination header", "  - route: [{destination: {host: orders}, headers: {request: {set: {'x(y)': b}}}}]\n", "spec.http[0].route[0].headers.request.set", "is not a header name", ErrInvalid},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := Decode([]byte(vsHead + c.in))
			var list Errors
			if !errors.As(err, &list) {
				t.Fatalf("error %v, want Errors", err)
			}
			for _, e := range list {
				if strings.HasPrefix(e.Path, c.path) && strings.Contains(e.Msg+e.Error(), c.msg) && errors.Is(e.Err, c.sentinel) {
					return
				}
			}
			t.Fatalf("%s\nerror %v, want %s: %s", c.in, err, c.path, c.msg)
		})
	}
}

// TestRewriteErrors: bad rewrites are refused, each naming its field.
func TestRewriteErrors(t *testing.T) {
	route := "    route: [{destination: {host: orders}}]\n"
	for _, c := range []struct{ name, in, path, msg string }{
		{"empty", "  - rewrite: {}\n" + route, "spec.http[0].rewrite", "set uri, authority or uriRegexRewrite"},
		{"both", "  - rewrite: {uri: /a, uriRegexRewrite: {match: a, rewrite: b}}\n" + route, "spec.http[0].rewrite.uri", "not both"},
		{"bad regex", "  - rewrite: {uriRegexRewrite: {match: '^/(a', rewrite: /b}}\n" + route, "spec.http[0].rewrite.uriRegexRewrite.match", "not an RE2 regular expression"},
		{"perl regex", "  - rewrite: {uriRegexRewrite: {match: '^/(?=a)', rewrite: /b}}\n" + route, "spec.http[0].rewrite.uriRegexRewrite.match", "not an RE2 regular expression"},
		{"no match", "  - rewrite: {uriRegexRewrite: {rewrite: /b}}\n" + route, "spec.http[0].rewrite.uriRegexRewrite.match", "required"},
		{"group", "  - rewrite: {uriRegexRewrite: {match: '^/(a)', rewrite: '/\\2'}}\n" + route, "spec.http[0].rewrite.uriRegexRewrite.rewrite", "has 1 capture groups"},
		{"uri on regex match", "  - match: [{uri: {regex: '/a.*'}}]\n    rewrite: {uri: /b}\n" + route, "spec.http[0].rewrite.uri", "use uriRegexRewrite"},
		{"authority", "  - rewrite: {authority: 'a/b'}\n" + route, "spec.http[0].rewrite.authority", "not a host"},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := Decode([]byte(vsHead + c.in))
			var list Errors
			if !errors.As(err, &list) {
				t.Fatalf("error %v, want Errors", err)
			}
			for _, e := range list {
				if strings.HasPrefix(e.Path, c.path) && strings.Contains(e.Msg+e.Error(), c.msg) && errors.Is(e.Err, ErrInvalid) {
					return
				}
			}
			t.Fatalf("%s\nerror %v, want %s: %s", c.in, err, c.path, c.msg)
		})
	}
	good := "  - rewrite: {uri: /v2, authority: 'new.example:8080'}\n" + route +
		"  - rewrite: {uriRegexRewrite: {match: '^/service/([^/]+)(/.*)$', rewrite: '\\2/instance/\\1'}}\n" + route
	if _, err := Decode([]byte(vsHead + good)); err != nil {
		t.Fatalf("good rewrites: %v", err)
	}
}

// TestRedirectErrors: bad redirects are refused, each naming its field.
func TestRedirectErrors(t *testing.T) {
	route := "    route: [{destination: {host: orders}}]\n"
	for _, c := range []struct{ name, in, path, msg string }{
		{"with route", "  - redirect: {uri: /a}\n" + route, "spec.http[0].redirect", "may not be set with route"},
		{"with rewrite", "  - redirect: {uri: /a}\n    rewrite: {uri: /b}\n", "spec.http[0].redirect", "may not be set with rewrite"},
		{"code", "  - redirect: {uri: /a, redirectCode: 304}\n", "spec.http[0].redirect.redirectCode", "304: want 301, 302, 303, 307 or 308"},
		{"uri and prefix", "  - redirect: {uri: /a, prefixRewrite: /b}\n", "spec.http[0].redirect.prefixRewrite", "not both"},
		{"prefix on exact", "  - match: [{uri: {exact: /x}}]\n    redirect: {prefixRewrite: /b}\n", "spec.http[0].redirect.prefixRewrite", "does not match the uri by prefix"},
		{"relative uri", "  - redirect: {uri: a}\n", "spec.http[0].redirect.uri", "want a path starting with /"},
		{"port", "  - redirect: {port: 70000}\n", "spec.http[0].redirect.port", "70000 not in [1, 65535]"},
		{"scheme", "  - redirect: {scheme: ftp}\n", "spec.http[0].redirect.scheme", `"ftp": want http or https`},
		{"authority", "  - redirect: {authority: 'a b'}\n", "spec.http[0].redirect.authority", "not a host"},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := Decode([]byte(vsHead + c.in))
			var list Errors
			if !errors.As(err, &list) {
				t.Fatalf("error %v, want Errors", err)
			}
			for _, e := range list {
				if strings.HasPrefix(e.Path, c.path) && strings.Contains(e.Msg+e.Error(), c.msg) && errors.Is(e.Err, ErrInvalid) {
					return
				}
			}
			t.Fatalf("%s\nerror %v, want %s: %s", c.in, err, c.path, c.msg)
		})
	}
	good := "  - match: [{uri: {prefix: /old/}}]\n    redirect: {prefixRewrite: /new/, authority: b.example, port: 8443, scheme: https, redirectCode: 308}\n" +
		"  - redirect: {uri: /v2, derivePort: FROM_REQUEST_PORT}\n"
	if _, err := Decode([]byte(vsHead + good)); err != nil {
		t.Fatalf("good redirects: %v", err)
	}
}

// TestCORSErrors: bad corsPolicy values are refused, each naming its field.
func TestCORSErrors(t *testing.T) {
	route := "    route: [{destination: {host: orders}}]\n"
	for _, c := range []struct{ name, in, path, msg string }{
		{"origin regex", "  - corsPolicy: {allowOrigins: [{regex: '(?=x)'}]}\n" + route, "spec.http[0].corsPolicy.allowOrigins[0]", ""},
		{"origin empty", "  - corsPolicy: {allowOrigins: [{}]}\n" + route, "spec.http[0].corsPolicy.allowOrigins[0]", "one of exact, prefix or regex"},
		{"method", "  - corsPolicy: {allowMethods: [get]}\n" + route, "spec.http[0].corsPolicy.allowMethods[0]", `"get" is not an HTTP method`},
		{"header", "  - corsPolicy: {allowHeaders: ['x y']}\n" + route, "spec.http[0].corsPolicy.allowHeaders[0]", "is not a header name"},
		{"expose", "  - corsPolicy: {exposeHeaders: ['a:b']}\n" + route, "spec.http[0].corsPolicy.exposeHeaders[0]", "is not a header name"},
		{"max age", "  - corsPolicy: {maxAge: -1s}\n" + route, "spec.http[0].corsPolicy.maxAge", "must not be negative"},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := Decode([]byte(vsHead + c.in))
			var list Errors
			if !errors.As(err, &list) {
				t.Fatalf("error %v, want Errors", err)
			}
			for _, e := range list {
				if strings.HasPrefix(e.Path, c.path) && strings.Contains(e.Msg+e.Error(), c.msg) && errors.Is(e.Err, ErrInvalid) {
					return
				}
			}
			t.Fatalf("%s\nerror %v, want %s: %s", c.in, err, c.path, c.msg)
		})
	}
	good := "  - corsPolicy: {allowOrigin: ['https://a'], allowOrigins: [{prefix: 'https://b'}], allowMethods: [GET], allowHeaders: ['*'], maxAge: 1h, allowCredentials: false, unmatchedPreflights: FORWARD}\n" + route
	if _, err := Decode([]byte(vsHead + good)); err != nil {
		t.Fatalf("good corsPolicy: %v", err)
	}
}

// TestDecodeRetryRemoteLocalities: retries.retryRemoteLocalities is read
// (camelCase and snake_case, true and false) instead of refused; with
// retries off (attempts 0) it is refused, as Istio's validator does.
func TestDecodeRetryRemoteLocalities(t *testing.T) {
	objs, err := Decode([]byte(vsHead + "  - match: [{uri: {prefix: /a}}]\n    route: [{destination: {host: orders}}]\n    retries: {attempts: 2, retryOn: 5xx, retryRemoteLocalities: true}\n" +
		"  - route: [{destination: {host: orders}}]\n    retries: {attempts: 1, retry_remote_localities: false}\n"))
	if err != nil {
		t.Fatal(err)
	}
	h := objs[0].VirtualService.Http
	if r := h[0].Retries; r.GetRetryRemoteLocalities() == nil || !r.GetRetryRemoteLocalities().GetValue() || r.GetAttempts() != 2 {
		t.Fatalf("retryRemoteLocalities true read as %v", r)
	}
	if r := h[1].Retries; r.GetRetryRemoteLocalities() == nil || r.GetRetryRemoteLocalities().GetValue() {
		t.Fatalf("retry_remote_localities false read as %v", r)
	}
	_, err = Decode([]byte(vsHead + "  - route: [{destination: {host: orders}}]\n    retries: {attempts: 0, retryRemoteLocalities: false}\n"))
	var fe *FieldError
	if !errors.As(err, &fe) || fe.Path != "spec.http[0].retries.retryRemoteLocalities" || !errors.Is(err, ErrInvalid) {
		t.Fatalf("attempts 0 with retryRemoteLocalities: %v", err)
	}
}
