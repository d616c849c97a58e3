// Command terraform-provider-meepa serves the meepa Terraform provider.
package main

import (
	"context"
	"flag"
	"fmt"
	"log"

	"github.com/hashicorp/terraform-plugin-framework/providerserver"

	"github.com/bogpad/terraform-provider-meepa/internal/provider"
	"github.com/bogpad/terraform-provider-meepa/internal/version"
)

func main() {
	var debug, showVersion bool
	flag.BoolVar(&debug, "debug", false, "start the provider in debug mode, for debuggers such as delve")
	flag.BoolVar(&showVersion, "version", false, "print version, commit and platform (the same as the bundled agent-runner's `version`)")
	flag.Parse()
	if showVersion {
		fmt.Println(version.Line("terraform-provider-meepa"))
		return
	}

	err := providerserver.Serve(context.Background(), provider.New(version.Version), providerserver.ServeOpts{
		Address:         provider.Address,
		Debug:           debug,
		ProtocolVersion: 6,
	})
	if err != nil {
		log.Fatal(err)
	}
}
