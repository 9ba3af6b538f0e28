//go:build !unix

package browsertest

import "errors"

func lock(string) (func(), error) {
	return nil, errors.New("browsertest: installing Chromium needs a Unix system")
}
