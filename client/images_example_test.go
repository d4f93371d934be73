package client_test

import (
	"context"
	"fmt"
	"io"
	"log"
	"os"

	"github.com/forkbox/forkbox/api"
	"github.com/forkbox/forkbox/client"
)

func ExampleClient_BuildImage() {
	c := client.FromEnv()
	recipe := api.Recipe{
		Name: "py",
		Base: "debian:bookworm",
		Steps: []api.RecipeStep{
			{Run: "apt-get update && apt-get install -y --no-install-recommends python3 python3-pip"},
			{Env: map[string]string{"PYTHONUNBUFFERED": "1"}},
			{Copy: &api.CopyStep{Src: "requirements.txt", Dest: "/tmp/requirements.txt"}},
			{Run: "pip install --break-system-packages -r /tmp/requirements.txt"},
			{Workdir: "/workspace"},
		},
	}
	// ./build holds requirements.txt, which the copy step sends into the image.
	img, err := c.BuildImage(context.Background(), recipe, "./build", func(ev api.BuildEvent) {
		switch ev.Type {
		case api.BuildEventStep:
			cached := ""
			if ev.Cached {
				cached = " (cached)"
			}
			fmt.Printf("Step %d/%d %s: %s%s\n", ev.Step, ev.Total, ev.Kind, ev.Detail, cached)
		case api.BuildEventLog:
			fmt.Println("   ", ev.Line)
		}
	})
	if err != nil {
		log.Fatal(err) // a failing step: its exit status and the end of its output
	}
	sb, err := c.CreateSandbox(context.Background(), api.CreateSandboxRequest{Image: img.Name})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(sb.ID)
}

func ExampleClient_BuildImageYAML() {
	recipe, err := os.ReadFile("images/py.yaml")
	if err != nil {
		log.Fatal(err)
	}
	img, err := client.FromEnv().BuildImageYAML(context.Background(), recipe, "images", nil)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(img.Name, img.ID)
}

func ExampleClient_ImportImage() {
	// docker save python:3.12-slim > python.tar
	f, err := os.Open("python.tar")
	if err != nil {
		log.Fatal(err)
	}
	defer f.Close()
	img, err := client.FromEnv().ImportImage(context.Background(), "python312", f, nil)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(img.Name, len(img.Layers), "layers")
}

func ExampleTarDir() {
	// An OCI image layout directory (skopeo copy docker://python:3.12 oci:py312)
	// goes to ImportImage as a tar, written as it is sent.
	pr, pw := io.Pipe()
	go func() { pw.CloseWithError(client.TarDir(pw, "py312")) }()
	defer pr.Close()
	img, err := client.FromEnv().ImportImage(context.Background(), "python312", pr, nil)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(img.Name)
}
