// Loads and validates an OpenAPI 3.0 document with kin-openapi (the library oapi-codegen and
// many Go tools use; Debian's golang-github-getkin-kin-openapi-dev, built in GOPATH mode so no
// module is fetched). Usage: go run kin_openapi_check.go FILE
package main

import (
	"context"
	"fmt"
	"os"

	"github.com/getkin/kin-openapi/openapi3"
)

func main() {
	doc, err := openapi3.NewLoader().LoadFromFile(os.Args[1])
	if err != nil {
		fmt.Fprintln(os.Stderr, "kin-openapi: cannot load:", err)
		os.Exit(1)
	}
	if err := doc.Validate(context.Background()); err != nil {
		fmt.Fprintln(os.Stderr, "kin-openapi: invalid:", err)
		os.Exit(1)
	}
	fmt.Printf("kin-openapi: %s is a valid OpenAPI %s document (%d paths)\n", os.Args[1], doc.OpenAPI, len(doc.Paths))
}
