package client_test

import (
	"context"
	"encoding/base64"
	"fmt"
	"log"
	"os"

	"github.com/forkbox/forkbox/api"
	"github.com/forkbox/forkbox/client"
)

func ExampleClient_ChatStream() {
	ctx := context.Background()
	c := client.FromEnv()

	f, err := os.Open("sales.csv")
	if err != nil {
		log.Fatal(err)
	}
	defer f.Close()
	up, err := c.UploadFile(ctx, "sales.csv", f, "")
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("%s: %d rows of %v\n", up.Name, up.Rows, up.Columns)

	res, err := c.ChatStream(ctx, api.ChatRequest{
		Question: "What is the profit by region? Plot monthly revenue.",
		FileIDs:  []string{up.ID},
	}, func(ev api.ChatEvent) {
		switch ev.Type {
		case api.ChatEventText:
			fmt.Print(ev.Text)
		case api.ChatEventToolCall:
			fmt.Printf("\n--- running:\n%s\n", ev.Code)
		case api.ChatEventExecution:
			fmt.Println("--- done:", client.MainText(ev.Execution))
		}
	})
	if err != nil {
		log.Fatal(err)
	}
	for _, img := range res.Images {
		png, err := base64.StdEncoding.DecodeString(img.PNGBase64)
		if err != nil {
			log.Fatal(err)
		}
		if err := os.WriteFile(img.FileName, png, 0o644); err != nil {
			log.Fatal(err)
		}
	}

	// The next question runs in the same sandbox: df is still defined.
	res, err = c.Chat(ctx, api.ChatRequest{Question: "And by product?", ConversationID: res.ConversationID})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(res.Answer)
}
