// Package images embeds the recipes of the images forkbox builds itself.
package images

import _ "embed"

// Python is the recipe of the default "python" image.
//
//go:embed python.yaml
var Python []byte
