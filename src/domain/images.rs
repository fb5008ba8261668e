//! Images in a tool result: the checks an image passes before the model sees it, and the
//! re-encoding that brings a large one under the delivery size. Plain functions over the `image`
//! crate (PNG and JPEG only); the dispatcher runs them off the async threads, since decoding a
//! 4K frame takes milliseconds.
//!
//! Every image dropped or changed leaves a line in the returned warnings, which end up in the
//! output's `_image_warnings`: the model is never silently handed less than the tool sent.

use std::io::Cursor;

use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use image::codecs::jpeg::JpegEncoder;
use image::imageops::FilterType;
use image::{DynamicImage, ImageDecoder, ImageFormat, ImageReader};
use serde::Serialize;
use serde_json::Value;

/// Images one result may carry: a tool that shows more is asking the model to skim.
pub(crate) const MAX_IMAGES_PER_RESULT: usize = 2;

/// Largest base64 text accepted for one image (2 MiB of text, about 1.5 MiB of image).
pub(crate) const MAX_IMAGE_BASE64_CHARS: usize = 2 * 1024 * 1024;

/// Largest picture accepted: 4K UHD. Larger frames stall the decode and say no more to a model.
pub(crate) const MAX_IMAGE_PIXELS: u64 = 3840 * 2160;

/// Longest `vision_prompt` kept; longer ones are cut (it is a caption, not a document).
pub(crate) const MAX_VISION_PROMPT_CHARS: usize = 2000;

/// Largest base64 text delivered per image; a larger image is re-encoded down to it. 500 KiB
/// keeps two images and their turn well inside a realtime event.
pub(crate) const DELIVERY_MAX_BASE64_CHARS: usize = 500 * 1024;

/// The re-encoding steps tried in order until one fits: (height, JPEG quality). The first is
/// the usual model frame (720p at quality 80); each later one gives up some size and quality.
pub(crate) const REENCODE_STEPS: [(u32, u8); 4] = [(720, 80), (720, 60), (540, 55), (480, 45)];

/// Images a realtime model turn takes, over every call of the turn.
pub(crate) const MAX_IMAGES_PER_TURN: usize = 2;

/// Base64 text a realtime model turn takes, over every call of the turn.
pub(crate) const MAX_BASE64_PER_TURN: usize = 4 * 1024 * 1024;

const PNG_MAGIC: &[u8] = b"\x89PNG\r\n\x1a\n";
const JPEG_MAGIC: &[u8] = b"\xff\xd8";

/// An image that passed every check, ready for the model.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ToolImage {
    /// `image/png` or `image/jpeg`, matching the bytes.
    pub mime: &'static str,
    pub width: u32,
    pub height: u32,
    /// The image, base64 (standard alphabet, padded).
    pub data_b64: String,
    /// What the model should look for; may be empty.
    pub vision_prompt: String,
}

impl ToolImage {
    /// The `data:` URL of the image.
    pub fn data_url(&self) -> String {
        format!("data:{};base64,{}", self.mime, self.data_b64)
    }
}

/// Checks the `images` field of a result: returns the images that pass and a warning for every
/// one dropped or changed.
pub(crate) fn accept_images(images: &Value) -> (Vec<ToolImage>, Vec<String>) {
    let Value::Array(entries) = images else {
        return (
            Vec::new(),
            vec!["tool images must be a list; ignored".into()],
        );
    };
    let mut accepted = Vec::new();
    let mut warnings = Vec::new();
    if entries.len() > MAX_IMAGES_PER_RESULT {
        warnings.push(format!(
            "a tool may return at most {MAX_IMAGES_PER_RESULT} images; {} dropped",
            entries.len() - MAX_IMAGES_PER_RESULT
        ));
    }
    for (index, entry) in entries.iter().take(MAX_IMAGES_PER_RESULT).enumerate() {
        match accept_image(entry, &mut warnings, index) {
            Ok(image) => accepted.push(image),
            Err(why) => warnings.push(format!("image #{index} {why}; dropped")),
        }
    }
    (accepted, warnings)
}

fn accept_image(
    entry: &Value,
    warnings: &mut Vec<String>,
    index: usize,
) -> Result<ToolImage, String> {
    let Value::Object(entry) = entry else {
        return Err("is not an object".into());
    };
    let data: String = match entry.get("data_b64") {
        Some(Value::String(text)) => text.split_ascii_whitespace().collect(),
        _ => return Err("has no data_b64 text".into()),
    };
    if data.is_empty() {
        return Err("has empty data_b64".into());
    }
    if data.len() > MAX_IMAGE_BASE64_CHARS {
        return Err(format!(
            "is too large ({} > {MAX_IMAGE_BASE64_CHARS} base64 characters)",
            data.len()
        ));
    }
    let bytes = STANDARD
        .decode(&data)
        .map_err(|e| format!("has invalid base64 ({e})"))?;
    let (detected, format) = if bytes.starts_with(PNG_MAGIC) {
        ("image/png", ImageFormat::Png)
    } else if bytes.starts_with(JPEG_MAGIC) {
        ("image/jpeg", ImageFormat::Jpeg)
    } else {
        return Err("is neither PNG nor JPEG".into());
    };
    let mime = match entry.get("mime") {
        None | Some(Value::Null) => detected,
        Some(Value::String(m)) if m.trim().is_empty() => detected,
        Some(Value::String(declared)) => match normal_mime(declared) {
            Some(mime) if mime == detected => mime,
            Some(_) => {
                return Err(format!(
                    "is declared {declared:?} but its bytes are {detected}"
                ));
            }
            None => return Err(format!("has unsupported mime {declared:?}")),
        },
        Some(other) => return Err(format!("has unsupported mime {other}")),
    };
    let (width, height) = ImageReader::with_format(Cursor::new(&bytes), format)
        .into_dimensions()
        .map_err(|e| format!("could not be read as {detected} ({e})"))?;
    if width == 0 || height == 0 || u64::from(width) * u64::from(height) > MAX_IMAGE_PIXELS {
        return Err(format!(
            "is {width}x{height} pixels, over the {MAX_IMAGE_PIXELS}-pixel limit (3840x2160)"
        ));
    }
    let decoded = decode(&bytes, format).map_err(|e| format!("could not be decoded ({e})"))?;
    let mut vision_prompt = match entry.get("vision_prompt") {
        Some(Value::String(prompt)) => prompt.clone(),
        _ => String::new(),
    };
    let prompt_chars = vision_prompt.chars().count();
    if prompt_chars > MAX_VISION_PROMPT_CHARS {
        warnings.push(format!(
            "image #{index} vision_prompt is too long ({prompt_chars} > {MAX_VISION_PROMPT_CHARS} characters); truncated"
        ));
        vision_prompt = vision_prompt
            .chars()
            .take(MAX_VISION_PROMPT_CHARS)
            .collect();
    }
    if data.len() <= DELIVERY_MAX_BASE64_CHARS {
        return Ok(ToolImage {
            mime,
            width,
            height,
            data_b64: data,
            vision_prompt,
        });
    }
    let Some((smaller, width, height)) = reencode(&decoded) else {
        return Err(format!(
            "could not be re-encoded under {DELIVERY_MAX_BASE64_CHARS} base64 characters"
        ));
    };
    warnings.push(format!(
        "image #{index} was re-encoded to JPEG {width}x{height} to fit the \
         {DELIVERY_MAX_BASE64_CHARS}-character delivery limit"
    ));
    Ok(ToolImage {
        mime: "image/jpeg",
        width,
        height,
        data_b64: smaller,
        vision_prompt,
    })
}

/// `Image/PNG; charset=binary` → `image/png`, for the two types accepted.
fn normal_mime(declared: &str) -> Option<&'static str> {
    let essence = declared.split(';').next().unwrap_or("").trim();
    if essence.eq_ignore_ascii_case("image/png") {
        Some("image/png")
    } else if essence.eq_ignore_ascii_case("image/jpeg") {
        Some("image/jpeg")
    } else {
        None
    }
}

/// A full decode (a JPEG whose entropy data is broken fails here, not later at the model),
/// turned upright by its EXIF orientation.
fn decode(bytes: &[u8], format: ImageFormat) -> image::ImageResult<DynamicImage> {
    let mut decoder = ImageReader::with_format(Cursor::new(bytes), format).into_decoder()?;
    let orientation = decoder.orientation()?;
    let mut image = DynamicImage::from_decoder(decoder)?;
    image.apply_orientation(orientation);
    Ok(image)
}

/// Walks [`REENCODE_STEPS`]: the image scaled down (never up) to fit the step's 16:9 box, as
/// JPEG at the step's quality. The first that fits the delivery limit wins.
fn reencode(image: &DynamicImage) -> Option<(String, u32, u32)> {
    let rgb = DynamicImage::ImageRgb8(image.to_rgb8());
    for (box_height, quality) in REENCODE_STEPS {
        let box_width = box_height * 16 / 9;
        let scaled = if rgb.width() > box_width || rgb.height() > box_height {
            rgb.resize(box_width, box_height, FilterType::Triangle)
        } else {
            rgb.clone()
        };
        let mut jpeg = Vec::new();
        if scaled
            .write_with_encoder(JpegEncoder::new_with_quality(&mut jpeg, quality))
            .is_err()
        {
            return None;
        }
        let encoded = STANDARD.encode(&jpeg);
        if encoded.len() <= DELIVERY_MAX_BASE64_CHARS {
            return Some((encoded, scaled.width(), scaled.height()));
        }
    }
    None
}

/// What one model turn has left for images.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct TurnBudget {
    images: usize,
    base64: usize,
}

impl Default for TurnBudget {
    fn default() -> Self {
        Self {
            images: MAX_IMAGES_PER_TURN,
            base64: MAX_BASE64_PER_TURN,
        }
    }
}

impl TurnBudget {
    /// Keeps the images the turn still has room for, in order; returns the warning for the rest.
    pub(crate) fn take(&mut self, images: &mut Vec<ToolImage>) -> Option<String> {
        let before = images.len();
        images.retain(|image| {
            let fits = self.images > 0 && image.data_b64.len() <= self.base64;
            if fits {
                self.images -= 1;
                self.base64 -= image.data_b64.len();
            }
            fits
        });
        let omitted = before - images.len();
        (omitted > 0).then(|| {
            format!(
                "{omitted} image(s) omitted: a model turn takes at most {MAX_IMAGES_PER_TURN} \
                 images and {MAX_BASE64_PER_TURN} base64 characters"
            )
        })
    }
}

#[cfg(test)]
mod tests {
    use image::{ImageBuffer, Rgb};
    use serde_json::json;

    use super::*;

    /// A `width`x`height` gradient as PNG or JPEG bytes.
    fn picture(width: u32, height: u32, format: ImageFormat) -> Vec<u8> {
        let image = ImageBuffer::from_fn(width, height, |x, y| {
            Rgb([(x % 256) as u8, (y % 256) as u8, 128])
        });
        let mut bytes = Vec::new();
        DynamicImage::ImageRgb8(image)
            .write_to(&mut Cursor::new(&mut bytes), format)
            .unwrap();
        bytes
    }

    fn entry(bytes: &[u8], mime: Value) -> Value {
        json!({"data_b64": STANDARD.encode(bytes), "mime": mime, "vision_prompt": "look"})
    }

    #[test]
    fn a_good_png_passes_as_it_is() {
        let png = picture(64, 32, ImageFormat::Png);
        let (images, warnings) = accept_images(&json!([entry(&png, json!("image/png"))]));
        assert_eq!(warnings, Vec::<String>::new());
        assert_eq!(images.len(), 1);
        assert_eq!(
            (images[0].mime, images[0].width, images[0].height),
            ("image/png", 64, 32)
        );
        assert_eq!(images[0].data_b64, STANDARD.encode(&png));
        assert_eq!(images[0].vision_prompt, "look");
        assert!(
            images[0]
                .data_url()
                .starts_with("data:image/png;base64,iVBOR")
        );
    }

    #[test]
    fn a_missing_type_takes_the_detected_one_and_a_wrong_one_drops() {
        let jpeg = picture(16, 16, ImageFormat::Jpeg);
        let (images, _) = accept_images(&json!([entry(&jpeg, json!(null))]));
        assert_eq!(images[0].mime, "image/jpeg");
        let (images, warnings) = accept_images(&json!([
            entry(&jpeg, json!("image/png")),
            entry(&jpeg, json!("image/gif"))
        ]));
        assert!(images.is_empty());
        assert_eq!(
            warnings,
            [
                "image #0 is declared \"image/png\" but its bytes are image/jpeg; dropped",
                "image #1 has unsupported mime \"image/gif\"; dropped"
            ]
        );
    }

    #[test]
    fn each_bad_image_is_named() {
        let png = picture(8, 8, ImageFormat::Png);
        let mut cut = png.clone();
        cut.truncate(png.len() - 20);
        let (images, warnings) = accept_images(&json!([
            {"data_b64": "not base64!"},
            {"data_b64": STANDARD.encode(b"GIF89a....")},
        ]));
        assert!(images.is_empty());
        assert_eq!(
            warnings[0],
            format!(
                "image #0 has invalid base64 ({}); dropped",
                STANDARD.decode("notbase64!").unwrap_err()
            )
        );
        assert_eq!(warnings[1], "image #1 is neither PNG nor JPEG; dropped");
        let (_, warnings) = accept_images(&json!([{"data_b64": STANDARD.encode(&cut)}]));
        assert!(
            warnings[0].starts_with("image #0 could not be decoded"),
            "{warnings:?}"
        );
        let (_, warnings) = accept_images(&json!("x"));
        assert_eq!(warnings, ["tool images must be a list; ignored"]);
        let (_, warnings) = accept_images(&json!([1]));
        assert_eq!(warnings, ["image #0 is not an object; dropped"]);
    }

    #[test]
    fn at_most_two_per_result() {
        let png = picture(4, 4, ImageFormat::Png);
        let three = json!([
            entry(&png, json!(null)),
            entry(&png, json!(null)),
            entry(&png, json!(null))
        ]);
        let (images, warnings) = accept_images(&three);
        assert_eq!(images.len(), 2);
        assert_eq!(warnings, ["a tool may return at most 2 images; 1 dropped"]);
    }

    #[test]
    fn a_long_prompt_is_cut() {
        let png = picture(4, 4, ImageFormat::Png);
        let mut e = entry(&png, json!(null));
        e["vision_prompt"] = json!("é".repeat(2500));
        let (images, warnings) = accept_images(&json!([e]));
        assert_eq!(images[0].vision_prompt.chars().count(), 2000);
        assert_eq!(
            warnings,
            ["image #0 vision_prompt is too long (2500 > 2000 characters); truncated"]
        );
    }

    #[test]
    fn too_many_pixels_or_too_much_text_drop() {
        let huge = picture(4000, 2200, ImageFormat::Png);
        let (images, warnings) = accept_images(&json!([entry(&huge, json!(null))]));
        assert!(images.is_empty());
        assert_eq!(
            warnings,
            ["image #0 is 4000x2200 pixels, over the 8294400-pixel limit (3840x2160); dropped"]
        );
        let (_, warnings) =
            accept_images(&json!([{"data_b64": "A".repeat(MAX_IMAGE_BASE64_CHARS + 4)}]));
        assert_eq!(
            warnings,
            ["image #0 is too large (2097156 > 2097152 base64 characters); dropped"]
        );
    }

    #[test]
    fn the_turn_budget_keeps_the_first_that_fit() {
        let image = |n: usize| ToolImage {
            mime: "image/png",
            width: 1,
            height: 1,
            data_b64: "A".repeat(n),
            vision_prompt: String::new(),
        };
        let mut budget = TurnBudget::default();
        let mut first = vec![image(3 << 20)];
        assert_eq!(budget.take(&mut first), None);
        let mut second = vec![image(2 << 20), image(10)];
        assert_eq!(
            budget.take(&mut second).as_deref(),
            Some(
                "1 image(s) omitted: a model turn takes at most 2 images and 4194304 base64 characters"
            )
        );
        assert_eq!(second, [image(10)]);
        let mut third = vec![image(1)];
        assert!(budget.take(&mut third).is_some());
        assert!(third.is_empty());
    }
}
