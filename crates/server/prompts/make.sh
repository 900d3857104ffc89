#!/bin/sh
# Makes the SIP PIN prompts (see README.md). Needs espeak-ng and opus-tools (Debian packages).
set -e
cd "$(dirname "$0")"
say() {
    espeak-ng -v en-us -s 150 -w "$1.wav" "$2"
    opusenc --quiet --bitrate 16 --framesize 20 --comp 10 --discard-comments "$1.wav" "$1.opus"
    rm "$1.wav"
}
say enter "Please enter the conference PIN, followed by the hash key."
say invalid "That PIN is not valid."
say joining "Joining the conference."
say goodbye "Goodbye."
