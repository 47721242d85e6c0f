// A real SMTP server on 127.0.0.1 for the suite (the `smtp-server` package), the one the e2e
// settings mail through (`[notifications] smtp_url`, end2end/nrllm-e2e.toml). Each message it
// receives is written whole to target/e2e/mail/<n>.eml, where the specs read it
// (`mailsTo`), so a spec follows the links a real mail carries.
import { SMTPServer } from "smtp-server";
import { mkdirSync, readdirSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { simpleParser, ParsedMail } from "mailparser";

export const MAIL_PORT = 2526;
export const MAIL_DIR = "../target/e2e/mail";

export async function startMailServer(): Promise<SMTPServer> {
  rmSync(MAIL_DIR, { recursive: true, force: true });
  mkdirSync(MAIL_DIR, { recursive: true });
  let count = 0;
  const server = new SMTPServer({
    authOptional: true,
    disabledCommands: ["STARTTLS", "AUTH"],
    logger: false,
    onData(stream, _session, callback) {
      const chunks: Buffer[] = [];
      stream.on("data", (chunk: Buffer) => chunks.push(chunk));
      stream.on("end", () => {
        count += 1;
        writeFileSync(`${MAIL_DIR}/${String(count).padStart(5, "0")}.eml`, Buffer.concat(chunks));
        callback();
      });
    },
  });
  await new Promise<void>((resolve) => server.listen(MAIL_PORT, "127.0.0.1", resolve));
  return server;
}

/** Every mail received so far to `address`, parsed, oldest first. */
export async function mailsTo(address: string): Promise<ParsedMail[]> {
  const mails: ParsedMail[] = [];
  for (const file of readdirSync(MAIL_DIR).sort()) {
    const mail = await simpleParser(readFileSync(`${MAIL_DIR}/${file}`));
    const to = Array.isArray(mail.to) ? mail.to : mail.to ? [mail.to] : [];
    if (to.some((t) => t.value.some((v) => v.address === address))) mails.push(mail);
  }
  return mails;
}
