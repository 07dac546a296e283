//go:build !linux

package builder

import "time"

// reaperCommand reports that this system has no child subreaper: the script
// runs directly, and only its process group is killed (a descendant that
// left the group with setsid survives it).
func reaperCommand(path string, args []string, grace time.Duration) (string, []string, []string, bool) {
	return path, args, nil, false
}
