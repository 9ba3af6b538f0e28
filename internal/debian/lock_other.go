//go:build !unix

package debian

import "errors"

func lock(string) (func(), error) {
	return nil, errors.New("debian: installing packages needs a Unix system")
}
