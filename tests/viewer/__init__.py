"""The web pages of `memcli serve` (/ui), through a test client, HTTP and Chromium."""
