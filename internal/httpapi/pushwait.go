package httpapi

import (
	"context"
	"fmt"
	"time"
)

// PushWaiter is the control plane as config writes see it: a write is
// answered once the push engine has published its revision, so that a
// subscriber connecting after the answer gets that config or newer.
type PushWaiter interface {
	WaitPublished(ctx context.Context, rev int64) error
}

// SetPushWaiter makes config writes wait (at most pushWaitMax in all) for
// each of ws (the push engine, the Gateways' publisher) to publish their
// revision. Before SetRegistry.
func (a *API) SetPushWaiter(ws ...PushWaiter) { a.pushWait.Store(&ws) }

// pushWaitMax bounds the wait: a config round takes milliseconds to a few
// hundred (a full recomputation of thousands of services); past this the
// write is answered anyway, saying so.
const pushWaitMax = 10 * time.Second

// waitPublished waits for the control plane to publish rev, the revision
// of a write that changed config (changed false: nothing to wait for). It
// answers nil when there is no control plane, else whether it did and, if
// not, why.
func (a *API) waitPublished(ctx context.Context, rev int64, changed bool) (published *bool, warning string) {
	wp := a.pushWait.Load()
	if wp == nil {
		return nil, ""
	}
	ok := true
	if !changed {
		return &ok, ""
	}
	ctx, cancel := context.WithTimeout(ctx, pushWaitMax)
	defer cancel()
	var err error
	for _, w := range *wp {
		if err = w.WaitPublished(ctx, rev); err != nil {
			break
		}
	}
	if err != nil {
		ok = false
		warning = fmt.Sprintf("written at revision %d, but the control plane has not published it within %v: "+
			"xDS subscribers may still get the previous config for a while (see sextant push status)", rev, pushWaitMax)
		a.log.Warn("httpapi: config written but not published in time", "revision", rev, "err", err)
	}
	return &ok, warning
}
