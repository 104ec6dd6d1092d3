package redisclient

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/redis/go-redis/v9"
)

// AuthError is a deployment that refused the credentials gatewayd was given: a password (or ACL user) that is
// wrong, missing, or given to a server that asks for none. Unlike a Redis that does not answer yet, it does not
// go away by waiting, so gatewayd refuses to start on it.
type AuthError struct {
	// Sentinel is true when a sentinel refused (Options.SentinelPassword), false when a data node did
	// (Options.Username and Password).
	Sentinel bool
	// Err is what Redis answered; it never holds the password.
	Err error
}

func (e *AuthError) Error() string {
	who := "a Redis node"
	if e.Sentinel {
		who = "a sentinel"
	}
	return fmt.Sprintf("%s refused the credentials: %v", who, e.Err)
}

func (e *AuthError) Unwrap() error { return e.Err }

// Check asks the deployment o describes whether it takes c's credentials: each sentinel that answers (Sentinel),
// then a data node through c. It answers an *AuthError when one refuses them, and another error when none
// answers (which a caller may wait out).
func Check(ctx context.Context, o Options, c redis.UniversalClient) error {
	if o.Mode == Sentinel {
		tc, err := tlsConfig(o)
		if err != nil {
			return err
		}
		var errs []error
		for _, addr := range o.Addrs {
			s := redis.NewSentinelClient(&redis.Options{Addr: addr, Password: o.SentinelPassword, TLSConfig: tc, MaxRetries: -1})
			err := s.Ping(ctx).Err()
			_ = s.Close()
			if err == nil {
				break
			}
			if refused(err) {
				return &AuthError{Sentinel: true, Err: err}
			}
			errs = append(errs, err)
		}
		if len(errs) == len(o.Addrs) {
			return fmt.Errorf("no sentinel answers: %w", errors.Join(errs...))
		}
	}
	if err := c.Ping(ctx).Err(); err != nil {
		if refused(err) {
			return &AuthError{Err: err}
		}
		return err
	}
	return nil
}

// refused reports whether err is Redis refusing a connection's credentials or its user's permissions.
func refused(err error) bool {
	s := err.Error()
	for _, m := range []string{"NOAUTH", "WRONGPASS", "NOPERM", "without any password configured", "invalid password"} {
		if strings.Contains(s, m) {
			return true
		}
	}
	return false
}
