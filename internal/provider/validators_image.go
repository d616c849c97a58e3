package provider

import (
	"fmt"

	"github.com/hashicorp/terraform-plugin-framework/schema/validator"

	"github.com/bogpad/terraform-provider-meepa/internal/runtime/image"
)

// packageName accepts what some package manager accepts as one argument and
// nothing a shell would interpret. The per-manager rules are applied in
// ValidateConfig, where package_manager is known.
func packageName() validator.String {
	return stringCheck{
		summary: "Invalid Package Name",
		desc:    "each must be " + image.PackagePatternDescription,
		check:   func(s string) error { return image.ValidatePackage(image.ManagerAuto, s) },
	}
}

func envVarName() validator.String {
	return stringCheck{
		summary: "Invalid Environment Variable Name",
		desc:    "names match `^[A-Za-z_][A-Za-z0-9_]*$`; HOME and TMPDIR are reserved",
		check:   image.ValidateEnvName,
	}
}

func envVarValue() validator.String {
	return stringCheck{
		summary: "Invalid Environment Variable Value",
		desc:    "values hold no newlines or other control characters (tab is allowed)",
		check:   image.ValidateEnvValue,
	}
}

func imageReference() validator.String {
	return stringCheck{
		summary: "Invalid Image Reference",
		desc:    "a Docker image reference",
		check: func(s string) error {
			if s == "" {
				return fmt.Errorf("the image reference is empty")
			}
			return image.ValidateImageRef(s)
		},
	}
}

// optionalImageReference is imageReference for an image that may be left
// empty (another attribute then supplies it).
func optionalImageReference() validator.String {
	return stringCheck{
		summary: "Invalid Image Reference",
		desc:    "a Docker image reference",
		check: func(s string) error {
			if s == "" {
				return nil
			}
			return image.ValidateImageRef(s)
		},
	}
}

func stringsOf[T ~string](vals []T) []string {
	s := make([]string, len(vals))
	for i, v := range vals {
		s[i] = string(v)
	}
	return s
}
